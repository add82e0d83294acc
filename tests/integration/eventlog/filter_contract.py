"""The event-log contract for reads filtered by stream prefix (read_all, subscribe, subscribe_batches
with `prefixes`): part of EventLogContract, so every adapter's contract test runs it."""
from __future__ import annotations

import asyncio
import uuid
from typing import AsyncIterator

import pytest

from sluice.eventlog import ANY_VERSION, NO_STREAM, EventLog, NewEvent, RecordedEvent
from sluice.eventlog.port import versions_read

TIMEOUT = 5.0


def _events(count: int) -> list[NewEvent]:
    return [NewEvent(id=str(uuid.uuid4()), type="Happened", data=b"{}") for _ in range(count)]


async def _take(subscription: AsyncIterator[RecordedEvent], count: int) -> list[RecordedEvent]:
    async def collect() -> list[RecordedEvent]:
        return [await anext(subscription) for _ in range(count)]

    return await asyncio.wait_for(collect(), TIMEOUT)


def _interleaved(log: EventLog) -> list[RecordedEvent]:
    """Streams of three families, interleaved, some names sharing the start of another prefix."""
    for round_ in range(4):
        log.append("schedule-a", _events(1), ANY_VERSION)
        log.append(f"matcher-{round_}", _events(2), NO_STREAM)
        log.append("sched", _events(1), ANY_VERSION)  # a prefix of "schedule-", not matching it
        log.append("checker-queue", _events(1), ANY_VERSION)
    return log.read_all(limit=10_000)


class StreamFilterContract:
    def test_filtered_read_all_returns_exactly_the_matching_events_in_order(self, log: EventLog) -> None:
        everything = _interleaved(log)
        for prefixes in (["schedule-"], ["matcher-", "checker-"], ["matcher-1"], ["sched"], ["nothing-"]):
            expected = [e for e in everything if e.stream.startswith(tuple(prefixes))]
            assert log.read_all(prefixes=prefixes, limit=10_000) == expected, prefixes
        assert log.read_all(prefixes=[], limit=10_000) == everything
        assert log.read_all(prefixes=["schedule-", ""], limit=10_000) == everything  # "" matches every stream

    def test_filtered_read_all_pages_by_global_positions(self, log: EventLog) -> None:
        everything = _interleaved(log)
        matching = [e for e in everything if e.stream.startswith("matcher-")]
        paged: list[RecordedEvent] = []
        while page := log.read_all(after=paged[-1].position if paged else 0, limit=3, prefixes=["matcher-"]):
            assert len(page) <= 3
            paged.extend(page)
        assert paged == matching
        skipped = next(e for e in everything if not e.stream.startswith("matcher-"))  # after may be any position
        assert log.read_all(after=skipped.position, prefixes=["matcher-"]) == [
            e for e in matching if e.position > skipped.position]
        assert log.read_all(after=everything[-1].position, prefixes=["matcher-"]) == []

    def test_prefixes_are_plain_strings_not_patterns(self, log: EventLog) -> None:
        for stream in ("job_1", "jobX1", "job%2", "jobY2", "Job_3", "a.b-1", "aXb-1"):
            log.append(stream, _events(1), NO_STREAM)
        assert [e.stream for e in log.read_all(prefixes=["job_"])] == ["job_1"]
        assert [e.stream for e in log.read_all(prefixes=["job%"])] == ["job%2"]
        assert [e.stream for e in log.read_all(prefixes=["job"])] == ["job_1", "jobX1", "job%2", "jobY2"]
        assert [e.stream for e in log.read_all(prefixes=["a.b"])] == ["a.b-1"]

    def test_prefixes_given_as_one_string_are_refused(self, log: EventLog) -> None:
        with pytest.raises(TypeError, match="prefixes"):
            log.read_all(prefixes="schedule-")  # type: ignore[arg-type]

    async def test_filtered_subscription_delivers_matching_appends_and_skips_others(self, log: EventLog) -> None:
        log.append("schedule-a", _events(1), NO_STREAM)
        log.append("matcher-a", _events(2), NO_STREAM)
        subscription = log.subscribe(prefixes=["schedule-"])
        assert [(e.stream, e.version) for e in await _take(subscription, 1)] == [("schedule-a", 0)]

        waiting = asyncio.ensure_future(_take(subscription, 2))
        await asyncio.sleep(0.02)  # let it reach its live wait
        log.append("matcher-a", _events(1), 1)
        await asyncio.to_thread(log.append, "schedule-b", _events(1), NO_STREAM)  # from another thread too
        log.append("matcher-b", _events(600), NO_STREAM)  # more than one read's worth of others
        log.append("schedule-a", _events(1), 0)
        live = await waiting
        assert [(e.stream, e.version) for e in live] == [("schedule-b", 0), ("schedule-a", 1)]
        assert live == [e for e in log.read_all(after=log.read_all(limit=1)[0].position, limit=10_000)
                        if e.stream.startswith("schedule-")]
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(anext(subscription), 0.2)

    async def test_filtered_subscription_from_a_skipped_position_and_in_batches(self, log: EventLog) -> None:
        log.append("matcher-a", _events(3), NO_STREAM)
        log.append("checker-queue", _events(2), NO_STREAM)
        skipped = log.head_position()  # a checker event's position
        subscription = log.subscribe_batches(after=skipped, prefixes=["matcher-", "run-"])
        waiting = asyncio.ensure_future(asyncio.wait_for(anext(subscription), TIMEOUT))
        await asyncio.sleep(0.02)
        log.append("checker-queue", _events(1), 1)
        log.append("run-1", _events(2), NO_STREAM)
        batch = await waiting
        assert [(e.stream, e.version) for e in batch] == [("run-1", 0), ("run-1", 1)]
        await subscription.aclose()

    def test_stream_versions_are_the_last_version_of_each_stream_moved_after_a_position(self, log: EventLog) -> None:
        everything = _interleaved(log)
        middle = everything[len(everything) // 2].position
        for after in (0, middle, everything[-1].position):
            for prefixes in ([], ["matcher-", "checker-"], ["sched"], ["nothing-"]):
                expected: dict[str, int] = {}
                for event in log.read_all(after=after, prefixes=prefixes, limit=10_000):
                    expected[event.stream] = event.version
                assert log.stream_versions(after, prefixes) == expected, (after, prefixes)
                assert versions_read(log, after, prefixes, page=2) == expected  # what KurrentDB does

    def test_read_all_to_head_reads_as_read_all_and_gives_a_head_to_go_on_from(self, log: EventLog) -> None:
        assert log.read_all_to_head(0, 10, ["schedule-"]) == ([], 0)
        everything = _interleaved(log)
        head = everything[-1].position
        for prefixes in ([], ["schedule-"], ["matcher-", "checker-"], ["nothing-"]):
            events, at = log.read_all_to_head(0, 10_000, prefixes)
            assert (events, at) == (log.read_all(0, 10_000, prefixes), head), prefixes
        first_two = log.read_all(0, 2, ["matcher-"])
        assert log.read_all_to_head(0, 2, ["matcher-"]) == (first_two, head)  # a full page: go on after its last
        assert log.read_all_to_head(head, 10, ["schedule-"]) == ([], head)
