"""Catch-up-then-live subscriptions over any adapter's `read_all`, shared by the adapters.

A filtered subscription (stream prefixes) reads the head position before each filtered read: a
read that comes back short has seen every matching event up to that head, so the subscription
goes on from there and never scans the same non-matching events again. It is woken only by
appends to streams it follows (`notify(streams)`), and polls for other processes' appends."""
from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import AsyncIterator, Callable, Iterable, Sequence

from sluice.eventlog.port import RecordedEvent, in_streams, stream_prefixes

BATCH = 500

ReadAll = Callable[[int, int, Sequence[str]], list[RecordedEvent]]


@dataclass(frozen=True, eq=False)
class _Waiter:
    loop: asyncio.AbstractEventLoop
    wake: asyncio.Event
    prefixes: tuple[str, ...]

    def follows_any(self, streams: Iterable[str]) -> bool:
        return any(in_streams(stream, self.prefixes) for stream in streams)


class Subscribers:
    """Wakes this process's subscribers on an append; they also poll for other processes' appends."""

    def __init__(self, read_all: ReadAll, poll_interval: float, closed: Callable[[], bool],
                 closed_error: type[Exception], head_position: Callable[[], int]) -> None:
        self._read_all = read_all
        self._head_position = head_position
        self._poll_interval = poll_interval
        self._closed = closed
        self._closed_error = closed_error
        self._waiters: set[_Waiter] = set()
        self._lock = threading.Lock()

    async def follow(self, after: int, prefixes: Sequence[str] = ()) -> AsyncIterator[RecordedEvent]:
        async for batch in self.follow_batches(after, prefixes):
            for event in batch:
                yield event

    async def follow_batches(self, after: int, prefixes: Sequence[str] = ()) -> AsyncIterator[list[RecordedEvent]]:
        waiter = _Waiter(asyncio.get_running_loop(), asyncio.Event(), stream_prefixes(prefixes))
        with self._lock:
            self._waiters.add(waiter)
        try:
            position = after
            while not self._closed():
                waiter.wake.clear()  # before reading: an append after the read sets it again
                batch, position = await self._read_batch(position, waiter.prefixes)
                if batch:
                    yield batch
                if len(batch) < BATCH:  # caught up when it read: only a wake or a poll can bring more
                    await self._wait(waiter.wake)
        finally:
            with self._lock:
                self._waiters.discard(waiter)

    def notify(self, streams: Iterable[str] | None = None) -> None:
        """Wake the subscribers that follow one of `streams` (just appended to); None wakes all."""
        appended = None if streams is None else list(streams)
        with self._lock:
            waiters = [w for w in self._waiters if appended is None or w.follows_any(appended)]
        for waiter in waiters:
            try:
                waiter.loop.call_soon_threadsafe(waiter.wake.set)
            except RuntimeError:  # that loop is closed; its subscriber is gone
                pass

    async def _read_batch(self, after: int, prefixes: tuple[str, ...]) -> tuple[list[RecordedEvent], int]:
        """Read off the event loop, so a writer holding the adapter's lock never blocks the loop."""
        try:
            return await asyncio.to_thread(self._read, after, prefixes)
        except self._closed_error:
            if self._closed():  # closed while reading: the subscription simply ends
                return [], after
            raise

    def _read(self, after: int, prefixes: tuple[str, ...]) -> tuple[list[RecordedEvent], int]:
        """The next read and the position to go on from."""
        if not prefixes:
            batch = self._read_all(after, BATCH, ())
            return batch, batch[-1].position if batch else after
        head = self._head_position()
        if head <= after:
            return [], after
        batch = self._read_all(after, BATCH, prefixes)
        if len(batch) == BATCH:
            return batch, batch[-1].position
        return batch, max(head, batch[-1].position if batch else after)

    async def _wait(self, wake: asyncio.Event) -> None:
        """Until an append in this process, or one poll interval (appends by other processes)."""
        try:
            await asyncio.wait_for(wake.wait(), self._poll_interval)
        except TimeoutError:
            pass
