"""Subscribers of a SqliteEventLog or a PostgresEventLog take this instance's own appends from its
in-memory tail, with no SQL read, and fall back to reading the log whenever the tail cannot prove it
holds what a read would return: another instance's (process's) appends in between, a follower
behind the tail."""
from __future__ import annotations

import asyncio
import itertools
import math
from datetime import timedelta
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterator

import pytest

from sluice.clock import SimulatedClock
from sluice.eventlog import NO_STREAM, Checkpoint, RecordedEvent, StreamAppend
from sluice.eventlog.postgres import PostgresEventLog
from sluice.eventlog.sql import SqlEventLogBase
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.eventlog.subscription import BATCH, TAIL_CAPACITY

from tests.integration.eventlog.contract import TIMEOUT, everything, new_event, new_events

pytestmark = pytest.mark.integration

NEVER = 3600.0
"""A poll interval no test waits out: whatever a subscriber gets, a wake or a read brought it."""


class CountingConnection:
    """The adapter's connection, counting the statements that read the log (SQLite appends' own
    version checks start with WITH, last_insert_rowid() is part of an append; PostgreSQL appends
    run on cursors of their own)."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self.reads = 0

    def execute(self, sql: str, params: Any = (), **options: Any) -> Any:
        if sql.lstrip().upper().startswith("SELECT") and "last_insert_rowid" not in sql:
            self.reads += 1
        return self._conn.execute(sql, params, **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def count_reads(log: SqlEventLogBase) -> CountingConnection:
    counting = CountingConnection(log._conn)
    log._conn = counting
    return counting


@pytest.fixture(params=["sqlite", "postgres"])
def open_log(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[SimulatedClock], SqlEventLogBase]:
    """Opens an instance on one log (file or database) each call, as a process would."""
    if request.param == "sqlite":
        return lambda clock: SqliteEventLog(tmp_path / "events.db", clock=clock, poll_interval=NEVER)
    dsn = request.getfixturevalue("postgres").create_database()
    return lambda clock: PostgresEventLog(dsn, clock=clock, poll_interval=NEVER)


@pytest.fixture
def clock() -> SimulatedClock:
    return SimulatedClock()


@pytest.fixture
def log(open_log: Callable[[SimulatedClock], SqlEventLogBase], clock: SimulatedClock) -> Iterator[SqlEventLogBase]:
    log = open_log(clock)
    yield log
    log.close()


@pytest.fixture
def other(open_log: Callable[[SimulatedClock], SqlEventLogBase], log: SqlEventLogBase) -> Iterator[SqlEventLogBase]:
    """Another instance on the same log, as another process: its appends wake nobody in `log`."""
    other = open_log(SimulatedClock())
    yield other
    other.close()


async def take(subscription: AsyncIterator[RecordedEvent], count: int) -> list[RecordedEvent]:
    async def collect() -> list[RecordedEvent]:
        return [await anext(subscription) for _ in range(count)]

    return await asyncio.wait_for(collect(), TIMEOUT)


_starts = itertools.count()


async def following(log: SqlEventLogBase, after: int = 0, prefixes: tuple[str, ...] = ()) -> AsyncIterator[RecordedEvent]:
    """A subscription from `after` that has taken its first event, appended here (so it is past its
    first read and follows: the log's appends from now on reach it through the tail)."""
    subscription = log.subscribe(after, prefixes)
    stream = f"{prefixes[0] if prefixes else ''}start-{next(_starts)}"
    log.append(stream, [new_event()], NO_STREAM)
    assert (await take(subscription, 1))[0].stream == stream
    return subscription


def matching(events: list[RecordedEvent], *prefixes: str) -> list[RecordedEvent]:
    return [event for event in events if event.stream.startswith(prefixes)]


async def test_a_follower_gets_this_instances_appends_without_reading_the_log(log: SqlEventLogBase,
                                                                             clock: SimulatedClock) -> None:
    subscription = await following(log)
    start = log.head_position()
    counting = count_reads(log)

    log.append("a", new_events(3), NO_STREAM)
    clock.advance(timedelta(seconds=1.5))
    log.append_batch([StreamAppend("a", [new_event(kind="x")], 2), StreamAppend("b", new_events(2), NO_STREAM)],
                     checkpoints=[Checkpoint("new-checkpoint", 7)])  # a checkpoint's insert follows the events'
    await asyncio.to_thread(log.append, "c", new_events(BATCH + 10), NO_STREAM)  # from another thread, > a read
    received = await take(subscription, 3 + 3 + BATCH + 10)

    assert counting.reads == 0
    assert received == log.read_all(start, limit=10_000)  # positions, versions, metadata, recorded_at as read
    await subscription.aclose()


async def test_another_instances_append_in_between_is_read_in_order(log: SqlEventLogBase,
                                                                    other: SqlEventLogBase) -> None:
    subscription = await following(log)
    start = log.head_position()
    counting = count_reads(log)

    log.append("mine", new_events(2), NO_STREAM)
    other.append("theirs", new_events(3), NO_STREAM)  # wakes nobody here
    log.append("mine", new_events(2), 1)
    received = await take(subscription, 7)
    assert [(e.stream, e.version) for e in received] == [
        ("mine", 0), ("mine", 1), ("theirs", 0), ("theirs", 1), ("theirs", 2), ("mine", 2), ("mine", 3)]
    assert counting.reads > 0  # the tail cannot vouch for the other's events: they came from the file

    log.append("mine", new_events(1), 3)
    other.append("theirs", new_events(1), 2)
    other.append("theirs", new_events(1), 3)
    log.append("mine", new_events(1), 4)
    received += await take(subscription, 4)
    assert received == log.read_all(start, limit=100)
    await subscription.aclose()


async def test_filtered_followers_skip_nothing(log: SqlEventLogBase, other: SqlEventLogBase) -> None:
    followers = {prefix: await following(log, log.head_position(), (prefix,)) for prefix in ("x-", "y-")}
    start = log.head_position()
    counting = count_reads(log)

    log.append("x-1", new_events(2), NO_STREAM)
    log.append("z-1", new_events(5), NO_STREAM)  # nobody follows it
    log.append_batch([StreamAppend("y-1", new_events(1), NO_STREAM), StreamAppend("x-2", new_events(BATCH + 3),
                                                                                  NO_STREAM)])
    log.append("y-1", new_events(1), 0)
    own = log.read_all(start, limit=10_000)
    counting.reads = 0
    assert await take(followers["x-"], BATCH + 5) == matching(own, "x-")
    assert await take(followers["y-"], 2) == matching(own, "y-")
    assert counting.reads == 0

    other.append("x-9", new_events(1), NO_STREAM)
    other.append("y-9", new_events(1), NO_STREAM)
    log.append("z-1", new_events(1), 4)
    log.append("x-1", new_events(1), 1)
    log.append("y-1", new_events(1), 1)
    since = log.read_all(own[-1].position, limit=100)
    assert await take(followers["x-"], 2) == matching(since, "x-")
    assert await take(followers["y-"], 2) == matching(since, "y-")
    for subscription in followers.values():
        await subscription.aclose()


async def test_a_follower_behind_the_tail_catches_up_from_the_log(log: SqlEventLogBase) -> None:
    keeps_the_tail = await following(log)
    for n in range(3):  # more than the tail holds, in several commits
        log.append("old", new_events(TAIL_CAPACITY), n * TAIL_CAPACITY - 1)
    everything_so_far = everything(log)
    counting = count_reads(log)

    late = log.subscribe()
    assert await take(late, len(everything_so_far)) == everything_so_far
    # from the file up to the tail's start, then from the tail
    assert 0 < counting.reads <= math.ceil((len(everything_so_far) - TAIL_CAPACITY) / BATCH) + 1
    counting.reads = 0
    log.append("new", new_events(2), NO_STREAM)
    assert [(e.stream, e.version) for e in await take(late, 2)] == [("new", 0), ("new", 1)]
    assert counting.reads == 0  # caught up, it follows from the tail again

    within = log.subscribe(after=everything_so_far[-10].position)  # a restart at a position the tail holds
    restarted = await take(within, 11)
    assert counting.reads == 0
    assert restarted == everything(log)[-11:]
    for subscription in (keeps_the_tail, late, within):
        await subscription.aclose()


async def test_appends_while_nobody_follows_are_read_from_the_log(log: SqlEventLogBase) -> None:
    first = await following(log)
    await first.aclose()  # nobody follows: appends are not kept
    log.append("unfollowed", new_events(3), NO_STREAM)
    subscription = await following(log, after=log.head_position())  # appends "start" and reads it
    log.append("followed", new_events(1), NO_STREAM)
    assert [e.stream for e in await take(subscription, 1)] == ["followed"]

    catching_up = log.subscribe(after=1)
    assert await take(catching_up, 5) == everything(log)[1:]
    for subscription in (subscription, catching_up):
        await subscription.aclose()


async def test_concurrent_writers_in_two_instances_leave_nothing_out(log: SqlEventLogBase, other: SqlEventLogBase) -> None:
    writers, per_writer = 4, 50
    unfiltered = await following(log)
    filtered = await following(log, log.head_position(), ("w-",))
    assert (await take(unfiltered, 1))[0].stream.startswith("w-start")
    start = log.head_position()

    def write(instance: SqlEventLogBase, stream: str) -> None:
        for n in range(per_writer):
            instance.append(stream, new_events(1), n - 1)

    await asyncio.gather(*(asyncio.to_thread(write, (log, other)[n % 2], f"w-{n}") for n in range(writers)),
                         asyncio.to_thread(write, other, "x-0"))
    everything_since = log.read_all(start, limit=10_000)
    log.append("last", new_events(1), NO_STREAM)  # a wake after other's last append, as a poll would bring
    assert await take(unfiltered, len(everything_since) + 1) == log.read_all(start, limit=10_000)
    assert await take(filtered, writers * per_writer) == matching(everything_since, "w-")
    for subscription in (unfiltered, filtered):
        await subscription.aclose()
