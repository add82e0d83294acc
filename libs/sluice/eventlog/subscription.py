"""Catch-up-then-live subscriptions over any adapter's `read_all`, shared by the adapters.

A filtered subscription (stream prefixes) reads the head position with each filtered read
(`read_all_to_head`): a read that comes back short has seen every matching event up to that head, so the subscription
goes on from there and never scans the same non-matching events again. It is woken only by
appends to streams it follows (`notify(streams)`), and polls for other processes' appends.

An adapter whose commits are provably gap-free and in position order (SQLite's BEGIN IMMEDIATE,
PostgreSQL's append lock) also hands each commit's events to the `Tail`: a subscriber then takes what it would have read straight from
memory, without a thread or a query, as long as the tail holds its next position onwards.
A deferred commit's events wait in `HeldBack` until it is durable."""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from bisect import bisect_right
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from operator import attrgetter
from typing import AsyncIterator, Callable, Iterable, Iterator, NamedTuple, Sequence

from sluice.eventlog.port import EventLogUnavailable, RecordedEvent, in_streams, stream_prefixes
from sluice.waiting import wait_set

log = logging.getLogger(__name__)

BATCH = 500
TAIL_CAPACITY = 4096
"""Events of this process's last commits kept for its subscribers (held: up to a quarter more)."""
TAIL_BYTES = 16 * 1024 * 1024
"""And at most this much of their data: a batch record (sluice.eventlog.batched) holds hundreds of events."""
REPORT_EVERY = 30.0
"""Seconds between two warnings that the log is unavailable to subscribers (they retry every poll)."""

ReadAll = Callable[[int, int, Sequence[str]], list[RecordedEvent]]
ReadToHead = Callable[[int, int, Sequence[str]], tuple[list[RecordedEvent], int]]
Read = tuple[list[RecordedEvent], int, bool]
"""A subscriber's read: the events, the position to go on from, and whether it was caught up then."""


@dataclass(frozen=True, eq=False)
class _Waiter:
    loop: asyncio.AbstractEventLoop
    wake: asyncio.Event
    prefixes: tuple[str, ...]

    def follows_any(self, streams: Iterable[str]) -> bool:
        return any(in_streams(stream, self.prefixes) for stream in streams)


class Tail:
    """The events this process committed last, as a read returns them, with their position runs.

    `record` must be called in commit order with each committed transaction's events, and only by an
    adapter where such events hold contiguous positions and every lower position is committed by
    then (or never will be). A position missing between two records (another process's commit)
    breaks a run; the tail serves only within the run that holds a reader's next position."""

    def __init__(self, capacity: int = TAIL_CAPACITY, max_bytes: int = TAIL_BYTES) -> None:
        self._capacity = capacity
        self._max_bytes = max_bytes
        self._bytes = 0
        self._events: list[RecordedEvent] = []
        self._runs: list[int] = []  # position - serial: equal exactly within a run of contiguous positions
        self._serial = 0
        self._lock = threading.Lock()

    def record(self, committed: Sequence[RecordedEvent]) -> None:
        with self._lock:
            if self._events and committed and committed[0].position <= self._events[-1].position:
                self._clear()  # not this tail's order: start again rather than serve anything wrong
            for event in committed:
                self._events.append(event)
                self._runs.append(event.position - self._serial)
                self._serial += 1
                self._bytes += len(event.data)
            excess = len(self._events) - self._capacity
            if excess > self._capacity // 4 or self._bytes > self._max_bytes:
                self._trim(max(0, excess))

    def _trim(self, drop: int) -> None:
        """Drop the oldest `drop` events, and more until their data is within three quarters of the
        byte bound: trimmed in chunks, one list move per thousand events or quarter of the bytes."""
        events = self._events
        size = self._bytes - sum(len(event.data) for event in events[:drop])
        while drop < len(events) and size > self._max_bytes * 3 // 4:
            size -= len(events[drop].data)
            drop += 1
        del events[:drop], self._runs[:drop]
        self._bytes = size

    def clear(self) -> None:
        with self._lock:
            self._clear()

    def _clear(self) -> None:
        self._events, self._runs, self._bytes = [], [], 0

    def read(self, after: int, limit: int, prefixes: tuple[str, ...]) -> Read | None:
        """What `Subscribers._read` would return from `after` as of the end of the run that holds
        position after+1; None when the tail does not hold it (a reader behind the tail, or another
        process's events next). Not caught up when it stops short of the tail's end (at a limit, or
        at another process's events)."""
        with self._lock:
            events = self._events
            if not events or events[-1].position <= after:
                return None
            start = bisect_right(events, after, key=_position)
            if events[start].position != after + 1:
                return None
            end = bisect_right(self._runs, self._runs[start], lo=start)  # every position up to end-1 is committed
            tail_end = events[-1].position
            if not prefixes:
                batch = events[start:min(end, start + limit)]
                return batch, batch[-1].position, batch[-1].position == tail_end
            run = events[start:end]
        batch = [event for event in run if event.stream.startswith(prefixes)]
        if len(batch) >= limit:
            del batch[limit:]
            return batch, batch[-1].position, batch[-1].position == tail_end
        return batch, run[-1].position, run[-1].position == tail_end


_position = attrgetter("position")


class Subscribers:
    """Wakes this process's subscribers on an append; they also poll for other processes' appends."""

    def __init__(self, read_all: ReadAll, poll_interval: float, closed: Callable[[], bool],
                 closed_error: type[Exception], read_to_head: ReadToHead) -> None:
        self._read_all = read_all
        self._read_to_head = read_to_head
        self._poll_interval = poll_interval
        self._closed = closed
        self._closed_error = closed_error
        self._waiters: set[_Waiter] = set()
        self._lock = threading.Lock()
        self._reported_at = -REPORT_EVERY
        self.tail = Tail()

    def following(self) -> bool:
        """Whether anyone subscribes: an adapter records into the tail only then."""
        return bool(self._waiters)

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
                batch, position, caught_up = await self._read_batch(position, waiter.prefixes)
                if batch:
                    yield batch
                if caught_up:  # only a wake or a poll can bring more
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

    async def _read_batch(self, after: int, prefixes: tuple[str, ...]) -> Read:
        """From the tail, or else off the event loop, so a writer holding the adapter's lock never blocks the loop."""
        if (served := self.tail.read(after, BATCH, prefixes)) is not None:
            return served
        try:
            return await asyncio.to_thread(self._read, after, prefixes)
        except EventLogUnavailable as error:  # an outage: read again after a poll interval, from the same place
            if not self._closed():
                self._report_unavailable(error)
            return [], after, True
        except self._closed_error:
            if self._closed():  # closed while reading: the subscription simply ends
                return [], after, True
            raise

    def _report_unavailable(self, error: EventLogUnavailable) -> None:
        now = time.monotonic()
        if now - self._reported_at >= REPORT_EVERY:
            self._reported_at = now
            log.warning("subscriptions wait for the event log: %s", error)

    def _read(self, after: int, prefixes: tuple[str, ...]) -> Read:
        """The next read from the log; a short read was caught up."""
        if not prefixes:
            batch = self._read_all(after, BATCH, ())
            return batch, batch[-1].position if batch else after, len(batch) < BATCH
        batch, head = self._read_to_head(after, BATCH, prefixes)
        if head <= after:
            return [], after, True
        if len(batch) == BATCH:
            return batch, batch[-1].position, False
        return batch, max(head, batch[-1].position if batch else after), True

    async def _wait(self, wake: asyncio.Event) -> None:
        """Until an append in this process, or one poll interval (appends by other processes)."""
        await wait_set(wake, self._poll_interval)


class _Held(NamedTuple):
    """A deferred commit not known durable yet."""
    ticket: int
    first: int                    # its first position
    events: list[RecordedEvent]   # as the tail takes them ([] when nobody followed then)
    streams: list[str]


class HeldBack:
    """A log's deferred commits (sluice.eventlog.deferred) not known durable yet, in commit order: their
    events reach the subscribers only at `release`, and the subscribers' reads stop before the first of
    them (`bound`). Its own lock lets reads that never take the log's append lock ask."""

    def __init__(self, subscribers: Subscribers) -> None:
        self._subscribers = subscribers
        self._commits: deque[_Held] = deque()
        self._lock = threading.Lock()
        self._in_flight: frozenset[str] = frozenset()

    def __len__(self) -> int:
        return len(self._commits)

    def hold(self, ticket: int, first: int, events: list[RecordedEvent], streams: list[str]) -> None:
        """The deferred commit that got `ticket`, its events from position `first` on (`events` as the tail
        takes them, [] when nobody followed then); the caller holds the log's append lock."""
        with self._lock:
            self._commits.append(_Held(ticket, first, events, streams))

    @contextmanager
    def in_flight(self, ids: Iterable[str]) -> Iterator[None]:
        """A deferred commit of these event ids is under way: a read may see it before it is held."""
        with self._lock:
            self._in_flight = frozenset(ids)
        try:
            yield
        finally:
            with self._lock:
                self._in_flight = frozenset()

    def release(self, durable: int) -> None:
        """Hand the commits whose tickets are up to `durable` to the subscribers, in commit order; the
        caller holds the log's append lock (the tail takes commits in commit order)."""
        streams: set[str] = set()
        commits = self._commits
        while commits and commits[0].ticket <= durable:
            with self._lock:
                released = commits.popleft()
            if released.events:
                self._subscribers.tail.record(released.events)
            streams.update(released.streams)
        if streams:
            self._subscribers.notify(streams)

    def bound(self, events: Sequence[RecordedEvent] = ()) -> int | None:
        """The last position subscribers may be served after a read that returned `events` (None: any):
        before the first commit held back, or in flight (the read may have seen it: its events tell).
        Asked after the read: a commit the read saw was in flight or held by then."""
        with self._lock:
            bound = self._commits[0].first - 1 if self._commits else None
            in_flight = self._in_flight
        if in_flight:
            seen = next((event.position for event in events if event.id in in_flight), None)
            if seen is not None and (bound is None or seen - 1 < bound):
                bound = seen - 1
        return bound
