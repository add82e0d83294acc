"""Filtered subscriptions (sluice.eventlog.subscription): they move past the events they skip, and
only appends to the streams they follow wake them."""
from __future__ import annotations

import asyncio
import sqlite3
import uuid
from typing import Sequence

import pytest

from sluice.eventlog import NO_STREAM, NewEvent, RecordedEvent
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.eventlog.subscription import BATCH, Subscribers

TIMEOUT = 5.0


def _events(count: int) -> list[NewEvent]:
    return [NewEvent(id=str(uuid.uuid4()), type="Happened", data=b"{}") for _ in range(count)]


class RecordingReads:
    """A log's read_all and read_all_to_head, recording where each read of events started and which
    streams it asked for (a read_all_to_head that found the head not past `after` read none)."""

    def __init__(self, log: SqliteEventLog) -> None:
        self.log = log
        self.reads: list[tuple[int, tuple[str, ...]]] = []

    def __call__(self, after: int, limit: int, prefixes: Sequence[str]) -> list[RecordedEvent]:
        self.reads.append((after, tuple(prefixes)))
        return self.log.read_all(after, limit, prefixes)

    def to_head(self, after: int, limit: int, prefixes: Sequence[str]) -> tuple[list[RecordedEvent], int]:
        events, head = self.log.read_all_to_head(after, limit, prefixes)
        if head > after:
            self.reads.append((after, tuple(prefixes)))
        return events, head

    def subscribers(self, poll_interval: float) -> Subscribers:
        return Subscribers(self, poll_interval, lambda: False, sqlite3.ProgrammingError, self.to_head)


@pytest.fixture
def log():
    log = SqliteEventLog()
    yield log
    log.close()


async def test_a_filtered_subscription_never_reads_the_events_it_skipped_again(log: SqliteEventLog) -> None:
    reads = RecordingReads(log)
    log.append("other", _events(BATCH + 20), NO_STREAM)  # more than one read's worth
    skipped_to = log.head_position()
    subscription = reads.subscribers(poll_interval=0.01).follow(0, ["mine-"])
    waiting = asyncio.ensure_future(asyncio.wait_for(anext(subscription), TIMEOUT))
    await asyncio.sleep(0.1)  # ten polls with nothing new: no read at all, the head has not moved
    assert reads.reads == [(0, ("mine-",))]

    log.append("other", _events(3), BATCH + 19)
    log.append("mine-1", _events(1), NO_STREAM)
    event = await waiting
    assert (event.stream, event.version) == ("mine-1", 0)
    assert [after for after, _ in reads.reads] == [0, skipped_to]
    await subscription.aclose()


async def test_a_full_filtered_read_goes_on_from_its_last_event_not_the_head(log: SqliteEventLog) -> None:
    reads = RecordingReads(log)
    log.append("mine-1", _events(BATCH + 5), NO_STREAM)
    subscription = reads.subscribers(poll_interval=0.01).follow_batches(0, ["mine-"])
    first = await asyncio.wait_for(anext(subscription), TIMEOUT)
    second = await asyncio.wait_for(anext(subscription), TIMEOUT)
    assert (len(first), len(second)) == (BATCH, 5)
    assert reads.reads[1][0] == first[-1].position
    await subscription.aclose()


async def test_only_appends_to_followed_streams_wake_a_filtered_subscriber(log: SqliteEventLog) -> None:
    reads = RecordingReads(log)
    subscribers = reads.subscribers(poll_interval=60.0)  # a poll would never come in time
    filtered = subscribers.follow(0, ["mine-"])
    unfiltered = subscribers.follow(0)
    waiting_filtered = asyncio.ensure_future(anext(filtered))
    waiting_unfiltered = asyncio.ensure_future(anext(unfiltered))
    await asyncio.sleep(0.05)  # both find nothing and park
    parked = len(reads.reads)

    log.append("other", _events(1), NO_STREAM)
    subscribers.notify(["other"])
    other = await asyncio.wait_for(waiting_unfiltered, TIMEOUT)
    await asyncio.sleep(0.05)
    assert other.stream == "other" and not waiting_filtered.done()
    assert [prefixes for _, prefixes in reads.reads[parked:]] == [()]  # the filtered one did not read

    log.append("mine-1", _events(1), NO_STREAM)
    subscribers.notify(["mine-1"])
    assert (await asyncio.wait_for(waiting_filtered, TIMEOUT)).stream == "mine-1"
    await filtered.aclose()
    await unfiltered.aclose()


async def test_an_adapter_wakes_only_the_subscribers_of_the_streams_it_appended_to(tmp_path) -> None:
    log = SqliteEventLog(tmp_path / "events.db", poll_interval=60.0)
    try:
        filtered = log.subscribe(prefixes=["mine-"])
        waiting = asyncio.ensure_future(anext(filtered))
        await asyncio.sleep(0.05)
        log.append("other", _events(1), NO_STREAM)
        await asyncio.sleep(0.05)
        assert not waiting.done()
        log.append_batch([])  # no events: wakes nobody
        log.append("mine-1", _events(1), NO_STREAM)
        assert (await asyncio.wait_for(waiting, TIMEOUT)).stream == "mine-1"
        await filtered.aclose()
    finally:
        log.close()
