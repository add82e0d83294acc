"""Group commit for the in-process bus: the sends waiting while one commit is under way go to the
file together, in the next commit, and each send returns once its own records are durable.

A file's commit waits for an fsync (synchronous=FULL, sluice.sqlite_wal): one per send made the
sends of a busy producer queue behind each other's fsyncs on the event loop. Here a commit runs in a
worker thread (sqlite3 releases the GIL while SQLite works) and the loop carries on meanwhile;
whatever is sent during it is committed next, in send order, in one transaction. What a send
promises is unchanged: when it returns, its records are in the file with their offsets. An
in-memory store has no fsync to wait for and is written at once, on the loop.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from sluice.bus.inprocess_store import BusStore, Headers
from sluice.bus.port import TopicPartition

__all__ = ["GroupCommit", "Row"]

Row = tuple[TopicPartition, bytes | None, bytes, Headers]
"""(partition, key, value, headers) of one record."""


class GroupCommit:
    """Appends rows to `store`; `appended(rows, offsets, timestamp_ms)` is told of each commit, on the loop,
    before its senders resume (the bus raises its known ends and wakes its consumers there)."""

    def __init__(self, store: BusStore, timestamp_ms: Callable[[], int],
                 appended: Callable[[Sequence[Row], list[int], int], None]) -> None:
        self._store = store
        self._timestamp_ms = timestamp_ms
        self._appended = appended
        self._waiting: list[tuple[Sequence[Row], asyncio.Future[list[int]]]] = []
        self._committing: asyncio.Task[None] | None = None

    async def append(self, rows: Sequence[Row]) -> list[int]:
        """The rows' offsets, once they are committed."""
        if not self._store.durable:
            timestamp_ms = self._timestamp_ms()
            offsets = self._store.append(rows, timestamp_ms)
            self._appended(rows, offsets, timestamp_ms)
            return offsets
        offsets: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
        self._waiting.append((rows, offsets))
        if self._committing is None:
            self._committing = asyncio.create_task(self._commit_waiting())
        return await offsets

    async def settle(self) -> None:
        """Until every send made so far is committed (or failed)."""
        while self._committing is not None:
            await asyncio.wait([self._committing])

    async def _commit_waiting(self) -> None:
        batch: list[tuple[Sequence[Row], asyncio.Future[list[int]]]] = []
        try:
            while self._waiting:
                batch, self._waiting = self._waiting, []
                rows = [row for sent, _ in batch for row in sent]
                timestamp_ms = self._timestamp_ms()
                try:
                    offsets = await asyncio.to_thread(self._store.append, rows, timestamp_ms)
                except Exception as error:  # every send of the transaction failed with it
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(error)
                    continue
                self._appended(rows, offsets, timestamp_ms)
                start = 0
                for sent, future in batch:
                    if not future.done():  # a cancelled send's records are committed all the same
                        future.set_result(offsets[start:start + len(sent)])
                    start += len(sent)
        finally:
            self._committing = None
            # cancelled (the loop is closing): nothing else will commit the waiting sends, nor answer the
            # batch under way (its thread may still commit it)
            for _, future in [*batch, *self._waiting]:
                if not future.done():
                    future.set_exception(RuntimeError("the bus stopped before these records were committed"))
            self._waiting = []
