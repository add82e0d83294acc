"""Catch-up-then-live subscriptions over any adapter's `read_all`, shared by the adapters."""
from __future__ import annotations

import asyncio
import threading
from typing import AsyncIterator, Callable

from sluice.eventlog.port import RecordedEvent

BATCH = 500


class Subscribers:
    """Wakes this process's subscribers on an append; they also poll for other processes' appends."""

    def __init__(self, read_all: Callable[[int, int], list[RecordedEvent]], poll_interval: float,
                 closed: Callable[[], bool], closed_error: type[Exception]) -> None:
        self._read_all = read_all
        self._poll_interval = poll_interval
        self._closed = closed
        self._closed_error = closed_error
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self._lock = threading.Lock()

    async def follow(self, after: int) -> AsyncIterator[RecordedEvent]:
        async for batch in self.follow_batches(after):
            for event in batch:
                yield event

    async def follow_batches(self, after: int) -> AsyncIterator[list[RecordedEvent]]:
        wake = asyncio.Event()
        waiter = (asyncio.get_running_loop(), wake)
        with self._lock:
            self._waiters.add(waiter)
        try:
            position = after
            while not self._closed():
                wake.clear()  # before reading: an append after the read sets it again
                batch = await self._read_batch(position)
                if batch:
                    position = batch[-1].position
                    yield batch
                else:
                    await self._wait(wake)
        finally:
            with self._lock:
                self._waiters.discard(waiter)

    def notify(self) -> None:
        with self._lock:
            waiters = list(self._waiters)
        for loop, wake in waiters:
            try:
                loop.call_soon_threadsafe(wake.set)
            except RuntimeError:  # that loop is closed; its subscriber is gone
                pass

    async def _read_batch(self, after: int) -> list[RecordedEvent]:
        """Read off the event loop, so a writer holding the adapter's lock never blocks the loop."""
        try:
            return await asyncio.to_thread(self._read_all, after, BATCH)
        except self._closed_error:
            if self._closed():  # closed while reading: the subscription simply ends
                return []
            raise

    async def _wait(self, wake: asyncio.Event) -> None:
        """Until an append in this process, or one poll interval (appends by other processes)."""
        try:
            await asyncio.wait_for(wake.wait(), self._poll_interval)
        except TimeoutError:
            pass
