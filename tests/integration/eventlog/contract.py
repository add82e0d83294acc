"""The contract every EventLog adapter passes, written against the port only.

An adapter's test module subclasses EventLogContract (the base is not collected: its name
has no Test prefix) and implements the hooks:

    class TestMyEventLog(EventLogContract):
        def make_log(self, tmp_path, clock):
            return MyEventLog(..., clock=clock)

        def reopen(self, log, tmp_path, clock):      # durable stores only
            log.close()
            return MyEventLog(..., clock=clock)

`clock` is a SimulatedClock: the adapter must take `recorded_at` from it. A durable store's test
class subclasses DurableEventLogContract instead, which adds the reopen test.
"""
from __future__ import annotations

import asyncio
import threading
import uuid
from collections import Counter
from datetime import timedelta, timezone
from pathlib import Path
from typing import AsyncIterator, Iterator

import pytest

from sluice.clock import Clock, SimulatedClock
from sluice.eventlog import (
    ANY_VERSION,
    NO_STREAM,
    Checkpoint,
    CheckpointMoved,
    DuplicateEventId,
    EventLog,
    NewEvent,
    RecordedEvent,
    StreamAppend,
    WrongExpectedVersion,
)

from tests.integration.eventlog.filter_contract import StreamFilterContract
from tests.support.waiting import until

TIMEOUT = 5.0  # upper bound for anything asynchronous; passing tests take milliseconds


def new_event(type: str = "Happened", data: bytes = b"{}", **metadata: str) -> NewEvent:
    return NewEvent(id=str(uuid.uuid4()), type=type, data=data, metadata=metadata)


def new_events(count: int, type: str = "Happened") -> list[NewEvent]:
    return [new_event(type, data=f'{{"n": {n}}}'.encode()) for n in range(count)]


def everything(log: EventLog) -> list[RecordedEvent]:
    events: list[RecordedEvent] = []
    while batch := log.read_all(after=events[-1].position if events else 0, limit=1000):
        events.extend(batch)
    return events


async def take(subscription: AsyncIterator[RecordedEvent], count: int) -> list[RecordedEvent]:
    """The next `count` events of a subscription, or fail after TIMEOUT."""

    async def collect() -> list[RecordedEvent]:
        return [await anext(subscription) for _ in range(count)]

    return await asyncio.wait_for(collect(), TIMEOUT)


async def assert_nothing_more(subscription: AsyncIterator[RecordedEvent], wait: float = 0.2) -> None:
    """No further event arrives within a short bounded wait (this ends the subscription)."""
    with pytest.raises(TimeoutError):
        event = await asyncio.wait_for(anext(subscription), wait)
        pytest.fail(f"unexpected extra event {event}")


class EventLogContract(StreamFilterContract):
    # -- hooks -------------------------------------------------------------------------------

    def make_log(self, tmp_path: Path, clock: Clock) -> EventLog:
        raise NotImplementedError("an adapter's test class returns a fresh, empty log here")

    def reopen(self, log: EventLog, tmp_path: Path, clock: Clock) -> EventLog:
        """Close `log` and open the same store again (durable stores only)."""
        raise NotImplementedError

    # -- fixtures ----------------------------------------------------------------------------

    @pytest.fixture
    def clock(self) -> SimulatedClock:
        return SimulatedClock()

    @pytest.fixture
    def log(self, tmp_path: Path, clock: SimulatedClock) -> Iterator[EventLog]:
        log = self.make_log(tmp_path, clock)
        yield log
        log.close()

    # -- appending and expected versions -----------------------------------------------------

    def test_append_to_new_stream_with_no_stream(self, log: EventLog) -> None:
        events = [new_event("Created"), new_event("Renamed")]
        assert log.append("order-1", events, NO_STREAM) == 1

        recorded = log.read_stream("order-1")
        assert [(e.id, e.stream, e.version, e.type, e.data) for e in recorded] == [
            (events[0].id, "order-1", 0, "Created", b"{}"),
            (events[1].id, "order-1", 1, "Renamed", b"{}"),
        ]
        assert log.stream_version("order-1") == 1

    def test_exact_expected_version_succeeds(self, log: EventLog) -> None:
        log.append("s", new_events(2), NO_STREAM)
        assert log.append("s", new_events(3), 1) == 4
        assert [e.version for e in log.read_stream("s")] == [0, 1, 2, 3, 4]

    def test_read_stream_from_a_version_gives_at_most_limit_events(self, log: EventLog) -> None:
        log.append("s", new_events(5), NO_STREAM)
        assert [e.version for e in log.read_stream("s", 1, limit=2)] == [1, 2]
        assert [e.version for e in log.read_stream("s", 3, limit=10)] == [3, 4]

    def test_wrong_expected_version_raises_and_writes_nothing(self, log: EventLog) -> None:
        log.append("s", new_events(2), NO_STREAM)
        head = log.head_position()

        with pytest.raises(WrongExpectedVersion) as raised:
            log.append("s", new_events(1), 0)
        assert (raised.value.stream, raised.value.expected, raised.value.actual) == ("s", 0, 1)

        with pytest.raises(WrongExpectedVersion) as raised:
            log.append("s", new_events(1), 5)
        assert (raised.value.stream, raised.value.expected, raised.value.actual) == ("s", 5, 1)

        assert log.stream_version("s") == 1
        assert len(log.read_stream("s")) == 2
        assert log.head_position() == head

    def test_exact_version_on_missing_stream_conflicts(self, log: EventLog) -> None:
        with pytest.raises(WrongExpectedVersion) as raised:
            log.append("missing", new_events(1), 0)
        assert (raised.value.stream, raised.value.expected, raised.value.actual) == ("missing", 0, NO_STREAM)
        assert log.read_stream("missing") == []

    def test_no_stream_on_existing_stream_conflicts(self, log: EventLog) -> None:
        log.append("s", new_events(3), NO_STREAM)
        with pytest.raises(WrongExpectedVersion) as raised:
            log.append("s", new_events(1), NO_STREAM)
        assert (raised.value.stream, raised.value.expected, raised.value.actual) == ("s", NO_STREAM, 2)
        assert log.stream_version("s") == 2

    def test_any_version_appends_to_new_and_existing_streams(self, log: EventLog) -> None:
        assert log.append("s", new_events(2), ANY_VERSION) == 1
        assert log.append("s", new_events(1), ANY_VERSION) == 2
        assert [e.version for e in log.read_stream("s")] == [0, 1, 2]

    def test_versions_are_zero_based_and_contiguous(self, log: EventLog) -> None:
        expected = NO_STREAM
        for size in (1, 3, 2, 1):
            expected = log.append("s", new_events(size), expected)
        assert expected == 6
        assert [e.version for e in log.read_stream("s")] == list(range(7))

    def test_streams_are_independent(self, log: EventLog) -> None:
        log.append("a", new_events(2), NO_STREAM)
        log.append("b", new_events(1), NO_STREAM)
        log.append("a", new_events(1), 1)
        assert [e.version for e in log.read_stream("a")] == [0, 1, 2]
        assert [e.version for e in log.read_stream("b")] == [0]
        assert {e.stream for e in log.read_stream("b")} == {"b"}

    def test_append_of_no_events_checks_version_and_returns_current(self, log: EventLog) -> None:
        assert log.append("new", [], NO_STREAM) == NO_STREAM
        assert log.stream_version("new") == NO_STREAM
        log.append("s", new_events(2), NO_STREAM)
        assert log.append("s", [], 1) == 1
        assert log.append("s", [], ANY_VERSION) == 1
        with pytest.raises(WrongExpectedVersion):
            log.append("s", [], 0)
        assert log.append("s", [], 1, checkpoints=[Checkpoint("consumer", 9)]) == 1
        assert log.read_checkpoint("consumer") == 9
        assert log.stream_version("s") == 1

    # -- reading -----------------------------------------------------------------------------

    def test_read_stream_from_version(self, log: EventLog) -> None:
        events = new_events(5)
        log.append("s", events, NO_STREAM)
        assert [e.id for e in log.read_stream("s", from_version=2)] == [e.id for e in events[2:]]
        assert [e.version for e in log.read_stream("s", from_version=4)] == [4]
        assert log.read_stream("s", from_version=5) == []

    def test_missing_stream_is_empty_with_version_minus_one(self, log: EventLog) -> None:
        assert log.read_stream("nope") == []
        assert log.stream_version("nope") == NO_STREAM == -1

    def test_read_all_in_position_order_with_after_and_limit(self, log: EventLog) -> None:
        log.append("a", new_events(2), NO_STREAM)
        log.append("b", new_events(2), NO_STREAM)
        log.append("a", new_events(1), 1)

        all_events = log.read_all()
        positions = [e.position for e in all_events]
        assert len(all_events) == 5
        assert positions[0] > 0
        assert all(p < q for p, q in zip(positions, positions[1:]))
        assert [(e.stream, e.version) for e in all_events] == [("a", 0), ("a", 1), ("b", 0), ("b", 1), ("a", 2)]

        assert log.read_all(after=positions[1]) == all_events[2:]
        assert log.read_all(after=positions[1], limit=2) == all_events[2:4]
        assert log.read_all(after=positions[-1]) == []
        assert log.read_all(limit=1) == all_events[:1]

    def test_read_all_pages_cover_everything_once(self, log: EventLog) -> None:
        for n in range(10):
            log.append(f"s-{n % 3}", new_events(n + 1), ANY_VERSION)
        full = log.read_all(limit=10_000)
        assert len(full) == sum(range(1, 11))

        paged: list[RecordedEvent] = []
        while page := log.read_all(after=paged[-1].position if paged else 0, limit=7):
            assert len(page) <= 7
            paged.extend(page)
        assert paged == full

    def test_head_position(self, log: EventLog) -> None:
        assert log.head_position() == 0
        log.append("a", new_events(3), NO_STREAM)
        assert log.head_position() == log.read_all()[-1].position
        log.append("b", new_events(1), NO_STREAM)
        last = log.read_all()[-1]
        assert (log.head_position(), last.stream) == (last.position, "b")

    # -- batches and checkpoints -------------------------------------------------------------

    def test_append_batch_writes_every_stream(self, log: EventLog) -> None:
        log.append("a", new_events(1), NO_STREAM)
        versions = log.append_batch(
            [StreamAppend("a", new_events(2), 0), StreamAppend("b", new_events(3), NO_STREAM)],
            checkpoints=[Checkpoint("bus", 42)],
        )
        assert versions == [2, 2]
        assert log.stream_version("a") == 2
        assert log.stream_version("b") == 2
        assert log.read_checkpoint("bus") == 42

    def test_append_batch_conflict_in_second_stream_writes_nothing(self, log: EventLog) -> None:
        log.append("b", new_events(1), NO_STREAM)
        log.save_checkpoint(Checkpoint("bus", 1))
        head = log.head_position()

        with pytest.raises(WrongExpectedVersion) as raised:
            log.append_batch(
                [StreamAppend("a", new_events(2), NO_STREAM), StreamAppend("b", new_events(1), NO_STREAM)],
                checkpoints=[Checkpoint("bus", 2)],
            )
        assert (raised.value.stream, raised.value.expected, raised.value.actual) == ("b", NO_STREAM, 0)
        assert log.read_stream("a") == []
        assert log.stream_version("b") == 0
        assert log.head_position() == head
        assert log.read_checkpoint("bus") == 1

    def test_checkpoints_written_with_append(self, log: EventLog) -> None:
        log.append("s", new_events(1), NO_STREAM, checkpoints=[Checkpoint("bus", 10), Checkpoint("timer", 3)])
        assert log.read_checkpoint("bus") == 10
        assert log.read_checkpoint("timer") == 3
        log.append("s", new_events(1), 0, checkpoints=[Checkpoint("bus", 11)])
        assert log.read_checkpoint("bus") == 11
        assert log.read_checkpoint("timer") == 3

    def test_checkpoints_not_written_when_append_conflicts(self, log: EventLog) -> None:
        log.append("s", new_events(1), NO_STREAM, checkpoints=[Checkpoint("bus", 10)])
        with pytest.raises(WrongExpectedVersion):
            log.append("s", new_events(1), NO_STREAM, checkpoints=[Checkpoint("bus", 11), Checkpoint("new", 1)])
        assert log.read_checkpoint("bus") == 10
        assert log.read_checkpoint("new") is None

    def test_save_and_read_checkpoint(self, log: EventLog) -> None:
        assert log.read_checkpoint("bus") is None
        log.save_checkpoint(Checkpoint("bus", 5))
        assert log.read_checkpoint("bus") == 5
        log.save_checkpoint(Checkpoint("bus", 0))
        assert log.read_checkpoint("bus") == 0
        log.save_checkpoint(Checkpoint("big", 2**62))
        assert log.read_checkpoint("big") == 2**62
        assert log.head_position() == 0  # checkpoints are not events

    def test_read_checkpoints_returns_the_saved_ones_among_the_names(self, log: EventLog) -> None:
        assert log.read_checkpoints([]) == {}
        log.append("s", new_events(1), NO_STREAM, checkpoints=[Checkpoint("bus:0", 7), Checkpoint("bus:1", 0)])
        log.save_checkpoint(Checkpoint("other", 3))
        assert log.read_checkpoints(["bus:0", "bus:1", "never", "bus:0"]) == {"bus:0": 7, "bus:1": 0}
        assert log.read_checkpoints(iter(["other"])) == {"other": 3}

    def test_a_checkpoint_with_expected_is_written_only_while_it_still_holds_that_value(self, log: EventLog) -> None:
        log.append("s", new_events(1), NO_STREAM, checkpoints=[Checkpoint("bus:0", 5, expected=0)])  # never saved: 0
        log.append("s", new_events(1), 0, checkpoints=[Checkpoint("bus:0", 9, expected=5), Checkpoint("free", 1)])
        assert log.read_checkpoints(["bus:0", "free"]) == {"bus:0": 9, "free": 1}

        with pytest.raises(CheckpointMoved) as moved:  # another member saved 9 since this one read 5
            log.append_batch([StreamAppend("s", new_events(1), 1), StreamAppend("t", new_events(1), NO_STREAM)],
                             checkpoints=[Checkpoint("bus:0", 12, expected=5), Checkpoint("free", 2)])
        assert (moved.value.stream, moved.value.expected, moved.value.actual) == ("bus:0", 5, 9)
        assert isinstance(moved.value, WrongExpectedVersion)  # a conflict like any other: decide again
        assert log.stream_version("s") == 1 and log.stream_version("t") == NO_STREAM
        assert log.read_checkpoints(["bus:0", "free"]) == {"bus:0": 9, "free": 1}

        with pytest.raises(CheckpointMoved):
            log.save_checkpoint(Checkpoint("bus:0", 12, expected=0))
        log.save_checkpoint(Checkpoint("bus:0", 12, expected=9))
        assert log.read_checkpoint("bus:0") == 12

    # -- event content -----------------------------------------------------------------------

    def test_recorded_at_comes_from_the_clock(self, log: EventLog, clock: SimulatedClock) -> None:
        first = clock.now()
        log.append("s", new_events(2), NO_STREAM)
        later = clock.advance(timedelta(hours=3, microseconds=250))
        log.append("s", new_events(1), 1)

        recorded = log.read_stream("s")
        assert [e.recorded_at for e in recorded] == [first, first, later]
        assert all(e.recorded_at.utcoffset() == timedelta(0) for e in recorded)
        assert recorded[0].recorded_at.tzinfo is not None
        assert log.read_all()[-1].recorded_at == later.astimezone(timezone.utc)

    def test_metadata_and_binary_data_round_trip(self, log: EventLog) -> None:
        binary = bytes(range(256)) + b"\x00\xff\x00"
        events = [
            new_event("Binary", data=binary, correlation_id="c-1", causation_id="e-0", note="héllo ✓"),
            new_event("Empty", data=b""),
            new_event("Json", data='{"name": "ünïcode"}'.encode()),
        ]
        log.append("s", events, NO_STREAM)

        for read in (log.read_stream("s"), log.read_all()):
            assert [(e.id, e.type, bytes(e.data), dict(e.metadata)) for e in read] == [
                (e.id, e.type, e.data, dict(e.metadata)) for e in events
            ]
            assert isinstance(read[0].data, bytes)

    def test_duplicate_event_id_rejected_and_nothing_written(self, log: EventLog) -> None:
        original = new_event("Original")
        log.append("a", [original], NO_STREAM, checkpoints=[Checkpoint("bus", 1)])
        head = log.head_position()

        reused = NewEvent(id=original.id, type="Copy", data=b"x")
        with pytest.raises(DuplicateEventId) as raised:
            log.append("b", [new_event(), reused], NO_STREAM, checkpoints=[Checkpoint("bus", 2)])
        assert raised.value.event_id == original.id

        twice = new_event()
        with pytest.raises(DuplicateEventId):
            log.append("c", [twice, twice], NO_STREAM)

        assert log.read_stream("b") == []
        assert log.read_stream("c") == []
        assert log.head_position() == head
        assert log.read_checkpoint("bus") == 1
        assert [e.type for e in log.read_all()] == ["Original"]

    def test_a_stale_writer_with_the_winners_ids_gets_wrong_expected_version(self, log: EventLog) -> None:
        """Event ids derive from (stream, version): the loser of a race reuses the winner's ids and
        must be told it lost the race, so it reloads and decides again."""
        winner = new_event("Winner")
        log.append("s", [winner], NO_STREAM)
        with pytest.raises(WrongExpectedVersion):
            log.append("s", [NewEvent(id=winner.id, type="Loser", data=b"")], NO_STREAM)
        assert [e.type for e in log.read_stream("s")] == ["Winner"]

    # -- concurrency -------------------------------------------------------------------------

    def test_concurrent_writers_exactly_one_wins_each_version(self, log: EventLog) -> None:
        writers, rounds = 6, 15
        barrier = threading.Barrier(writers, timeout=TIMEOUT)
        winners: dict[int, list[str]] = {r: [] for r in range(rounds)}
        conflicts = Counter[int]()
        errors: list[BaseException] = []

        def write(name: str) -> None:
            try:
                for r in range(rounds):
                    barrier.wait()  # everyone races for version r
                    try:
                        log.append("race", [new_event(name)], r - 1)  # r - 1 == NO_STREAM for r == 0
                        winners[r].append(name)
                    except WrongExpectedVersion as conflict:
                        assert conflict.actual == r
                        conflicts[r] += 1
            except BaseException as error:  # surfaced below; a broken barrier stops the others
                errors.append(error)
                barrier.abort()

        threads = [threading.Thread(target=write, args=(f"W{n}",)) for n in range(writers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(TIMEOUT * 2)
        assert not errors, errors

        assert all(len(winners[r]) == 1 for r in range(rounds)), winners
        assert all(conflicts[r] == writers - 1 for r in range(rounds)), conflicts
        recorded = log.read_stream("race")
        assert [e.version for e in recorded] == list(range(rounds))
        assert [e.type for e in recorded] == [winners[r][0] for r in range(rounds)]

    def test_concurrent_writers_retrying_lose_no_event(self, log: EventLog) -> None:
        writers, per_writer = 5, 20
        written: list[str] = []
        errors: list[BaseException] = []

        def write() -> None:
            try:
                for _ in range(per_writer):
                    event = new_event()
                    while True:
                        try:
                            log.append("shared", [event], log.stream_version("shared"))
                            written.append(event.id)
                            break
                        except WrongExpectedVersion:
                            continue
            except BaseException as error:
                errors.append(error)

        threads = [threading.Thread(target=write) for _ in range(writers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(TIMEOUT * 2)
        assert not errors, errors

        recorded = log.read_stream("shared")
        assert [e.version for e in recorded] == list(range(writers * per_writer))
        assert sorted(e.id for e in recorded) == sorted(written)
        assert len(set(written)) == writers * per_writer

    # -- subscribing -------------------------------------------------------------------------

    async def test_subscribe_catches_up_then_delivers_live_events(self, log: EventLog) -> None:
        log.append("a", new_events(3), NO_STREAM)
        subscription = log.subscribe()
        caught_up = await take(subscription, 3)
        assert [(e.stream, e.version) for e in caught_up] == [("a", 0), ("a", 1), ("a", 2)]

        waiting = asyncio.ensure_future(take(subscription, 3))
        await asyncio.sleep(0.02)  # let the subscriber reach its live wait
        log.append("b", new_events(1), NO_STREAM)
        await asyncio.to_thread(log.append, "a", new_events(2), 2)  # from another thread too
        live = await waiting

        assert [(e.stream, e.version) for e in live] == [("b", 0), ("a", 3), ("a", 4)]
        assert caught_up + live == everything(log)
        await assert_nothing_more(subscription)

    async def test_subscribe_from_a_middle_position(self, log: EventLog) -> None:
        log.append("a", new_events(4), NO_STREAM)
        middle = log.read_all()[1].position
        subscription = log.subscribe(after=middle)

        first = await take(subscription, 2)
        assert [e.version for e in first] == [2, 3]
        log.append("a", new_events(1), 3)
        assert [e.version for e in await take(subscription, 1)] == [4]

        at_head = log.subscribe(after=log.head_position())
        log.append("b", new_events(1), NO_STREAM)
        assert [(e.stream, e.version) for e in await take(at_head, 1)] == [("b", 0)]
        await assert_nothing_more(at_head)

    async def test_subscribe_catch_up_spans_many_batches(self, log: EventLog) -> None:
        log.append("big", new_events(2500), NO_STREAM)
        received = await take(log.subscribe(), 2500)
        assert [e.version for e in received] == list(range(2500))

    async def test_subscribe_batches_yields_every_event_once_in_nonempty_reads(self, log: EventLog) -> None:
        log.append("big", new_events(1200), NO_STREAM)
        subscription = log.subscribe_batches()
        batches = []
        while sum(map(len, batches)) < 1200:
            batches.append(await asyncio.wait_for(anext(subscription), 10))
        log.append("b", new_events(2), NO_STREAM)
        batches.append(await asyncio.wait_for(anext(subscription), 10))
        assert len(batches) > 2 and all(batches)
        assert [e for batch in batches for e in batch] == everything(log)
        await subscription.aclose()

    async def test_subscribe_during_concurrent_appends_skips_and_repeats_nothing(self, log: EventLog) -> None:
        writers, per_writer = 4, 25
        subscription = log.subscribe()
        received: list[RecordedEvent] = []

        async def consume() -> None:
            async for event in subscription:
                received.append(event)
                if len(received) == writers * per_writer:
                    return

        consumer = asyncio.ensure_future(consume())

        def write(stream: str) -> None:
            for n in range(per_writer):
                log.append(stream, new_events(1), n - 1)

        await asyncio.gather(*(asyncio.to_thread(write, f"w-{n}") for n in range(writers)))
        await asyncio.wait_for(consumer, TIMEOUT)

        assert received == everything(log)
        assert len({e.id for e in received}) == writers * per_writer
        await assert_nothing_more(subscription)

    async def test_cancelling_the_subscriber_ends_cleanly(self, log: EventLog) -> None:
        log.append("a", new_events(1), NO_STREAM)
        received: list[RecordedEvent] = []

        async def consume() -> None:
            async for event in log.subscribe():
                received.append(event)

        consumer = asyncio.ensure_future(consume())
        await until(lambda: len(received) == 1, "the event received", timeout=TIMEOUT, interval=0.005)
        consumer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(consumer, TIMEOUT)
        assert consumer.cancelled()

        log.append("a", new_events(1), 0)  # the log still works, with a new subscriber
        assert len(received) == 1
        assert len(await take(log.subscribe(), 2)) == 2

    # -- durability and lifecycle ------------------------------------------------------------

    def test_close_is_idempotent(self, tmp_path: Path, clock: SimulatedClock) -> None:
        log = self.make_log(tmp_path, clock)
        log.append("s", new_events(1), NO_STREAM)
        log.close()
        log.close()


class DurableEventLogContract(EventLogContract):
    """The contract of stores that keep their events across a close: their test classes subclass this."""

    def open_instance(self, tmp_path: Path, clock: Clock, poll_interval: float) -> EventLog:
        """Another instance on the store the `log` fixture uses, as another process would open it."""
        raise NotImplementedError

    async def test_another_instance_is_seen_by_polling(self, tmp_path: Path) -> None:
        clock = SimulatedClock()
        reader = self.open_instance(tmp_path, clock, poll_interval=0.01)
        writer = self.open_instance(tmp_path, clock, poll_interval=0.01)  # another process: no in-process wake-up
        try:
            writer.append("a", new_events(2), NO_STREAM)
            subscription = reader.subscribe()
            assert [e.version for e in await take(subscription, 2)] == [0, 1]

            writer.append("a", new_events(1), 1)
            writer.append("b", new_events(2), NO_STREAM)
            live = await take(subscription, 3)
            assert [(e.stream, e.version) for e in live] == [("a", 2), ("b", 0), ("b", 1)]
            assert live == writer.read_all(after=writer.read_all()[1].position)
            await assert_nothing_more(subscription)
        finally:
            reader.close()
            writer.close()


    async def test_own_appends_wake_subscribers_without_polling(self, tmp_path: Path) -> None:
        log = self.open_instance(tmp_path, SimulatedClock(), poll_interval=60.0)  # polling would never fire in time
        try:
            subscription = log.subscribe()
            log.append("a", new_events(1), NO_STREAM)
            assert [e.version for e in await take(subscription, 1)] == [0]
            waiting = asyncio.ensure_future(take(subscription, 1))
            await asyncio.sleep(0.05)  # let it find nothing new and park in its live wait
            assert not waiting.done()
            log.append("a", new_events(1), 0)
            assert [e.version for e in await waiting] == [1]
        finally:
            log.close()


    def test_durable_after_reopen(self, log: EventLog, tmp_path: Path, clock: SimulatedClock) -> None:
        log.append("a", new_events(2), NO_STREAM, checkpoints=[Checkpoint("bus", 7)])
        log.append_batch([StreamAppend("a", new_events(1), 1), StreamAppend("b", new_events(1), NO_STREAM)])
        before = everything(log)

        reopened = self.reopen(log, tmp_path, clock)
        try:
            assert everything(reopened) == before
            assert reopened.head_position() == before[-1].position
            assert reopened.stream_version("a") == 2
            assert reopened.read_checkpoint("bus") == 7
            assert reopened.append("a", new_events(1), 2) == 3
            with pytest.raises(WrongExpectedVersion):
                reopened.append("b", new_events(1), NO_STREAM)
            assert reopened.read_all(after=before[-1].position)[0].position > before[-1].position
        finally:
            reopened.close()
