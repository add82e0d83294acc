"""Errors in two kinds (issue 25): infrastructure failures pause the consumer on the same record, with
capped exponential backoff for as long as it takes and the service not ready meanwhile, and nothing is
dead-lettered; refusals go to the dead letter at once; a bug is tried a few times, then dead-lettered.
The outbox relay waits out a bus that is down. Sleeps are injected: nothing here sleeps."""
from __future__ import annotations

import errno
import sqlite3

import pytest

from sluice.bus.port import Record, TopicPartition
from sluice.domain.errors import FailedPrecondition, InvalidArgument
from sluice.eventlog.port import EventLogUnavailable
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.runtime.consumer import MAX_ATTEMPTS, BatchHandler, ConsumerLoop, Subscription
from sluice.runtime.errors import Backoff, MalformedMessage, is_infrastructure
from sluice.runtime.health import Health
from sluice.runtime.outbox import EVENT_ID_HEADER, POSITION_HEADER, RELAY_HEADER, OutboxRelay, Outgoing
from sluice.eventlog.port import NewEvent, StreamAppend


class OnceConsumer:
    """Hands out its records once; records the offsets committed."""

    def __init__(self, records: list[Record]) -> None:
        self._records = records
        self.committed: list[dict | None] = []

    async def poll(self, timeout: float = 1.0, max_records: int = 500) -> list[Record]:
        records, self._records = self._records, []
        return records

    async def commit(self, offsets=None) -> None:
        self.committed.append(offsets)

    def assignment(self) -> set:
        return {TopicPartition("t", 0)}

    async def close(self) -> None:
        pass


class DeadLetters:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes, dict]] = []

    async def send(self, topic, value, key=None, headers=()) -> None:
        self.sent.append((value, {name: value.decode() for name, value in headers}))

    async def close(self) -> None:
        pass


class Sleeps:
    """The injected sleep: records each delay and whether the service was ready while it waited."""

    def __init__(self, health: Health) -> None:
        self.delays: list[float] = []
        self.ready_while_waiting: list[bool] = []
        self._health = health

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        self.ready_while_waiting.append(self._health.ready())


def record(offset: int, value: bytes = b"v") -> Record:
    return Record("t", 0, offset, b"k", value, (), 0)


def failing(times: int, error: Exception, handled: list):
    failures = 0

    async def handler(rec: Record) -> None:
        nonlocal failures
        if failures < times:
            failures += 1
            raise error
        handled.append(rec.offset)
    return handler


async def loop_for(handler, records: list[Record]) -> tuple[ConsumerLoop, OnceConsumer, DeadLetters, Sleeps, Health]:
    health = Health()
    await health.recovered()
    sleeps = Sleeps(health)
    consumer, dead = OnceConsumer(records), DeadLetters()
    loop = ConsumerLoop(consumer, Subscription("g", {"t": handler}), dead, health=health, sleep=sleeps)
    return loop, consumer, dead, sleeps, health


INFRASTRUCTURE = [
    EventLogUnavailable("PostgreSQL unavailable: server closed the connection"),
    OSError(errno.ENOSPC, "No space left on device"),
    OSError(errno.EROFS, "Read-only file system"),
    sqlite3.OperationalError("attempt to write a readonly database"),
    sqlite3.OperationalError("database is locked"),
    sqlite3.OperationalError("disk I/O error"),
    TimeoutError("timed out"),
    ConnectionRefusedError("broker down"),
]


@pytest.mark.parametrize("error", INFRASTRUCTURE, ids=lambda error: f"{type(error).__name__}:{error}")
async def test_an_infrastructure_error_pauses_on_the_same_record_until_it_goes_through(error):
    handled: list[int] = []
    loop, consumer, dead, sleeps, health = await loop_for(failing(40, error, handled), [record(7), record(8)])

    assert await loop.step(0) == 2

    assert handled == [7, 8]  # the same record again, then the next: nothing skipped, nothing parked
    assert dead.sent == []
    assert len(sleeps.delays) == 40
    assert sleeps.delays[:8] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 3.0, 3.0, 3.0])
    assert set(sleeps.delays[5:]) == {3.0}  # capped, and it goes on past any attempt limit
    assert not any(sleeps.ready_while_waiting)  # NOT_SERVING while failing
    assert health.ready()  # and ready again once through
    assert consumer.committed == [None]  # committed only after the records were handled


async def test_while_failing_the_offset_is_not_committed_and_health_says_why():
    health = Health()
    await health.recovered()
    seen: list[str] = []

    async def sleep(delay: float) -> None:
        seen.append(health.why_not_ready())
        assert consumer.committed == []

    handled: list[int] = []
    consumer, dead = OnceConsumer([record(3)]), DeadLetters()
    loop = ConsumerLoop(consumer, Subscription("g", {"t": failing(3, EventLogUnavailable("down"), handled)}), dead,
                        health=health, sleep=sleep)
    await loop.step(0)
    assert handled == [3] and dead.sent == []
    assert seen and "EventLogUnavailable: down" in seen[0] and "g's log or bus" in seen[0]


async def test_a_batch_whose_apply_or_parse_meets_an_outage_waits_and_parks_nothing():
    applied: list[list[int]] = []
    apply_failures = parse_failures = 0

    def parse(rec: Record) -> int:
        nonlocal parse_failures
        if rec.offset == 1 and parse_failures < 2:  # parsing reads the log (the matcher loads a schedule)
            parse_failures += 1
            raise EventLogUnavailable("down while loading")
        return rec.offset

    async def apply(items) -> None:
        nonlocal apply_failures
        if apply_failures < 3:
            apply_failures += 1
            raise sqlite3.OperationalError("attempt to write a readonly database")
        applied.append([command for _, command in items])

    loop, consumer, dead, sleeps, health = await loop_for(BatchHandler(parse, apply), [record(0), record(1), record(2)])
    await loop.step(0)
    assert applied == [[0, 1, 2]]  # still one batch: not split record by record
    assert dead.sent == []
    assert len(sleeps.delays) == 5 and health.ready()


async def test_refusals_go_to_the_dead_letter_at_once_with_their_reason():
    calls = 0

    async def handler(rec: Record) -> None:
        nonlocal calls
        calls += 1
        raise {0: MalformedMessage("no id"), 1: InvalidArgument("name", "must not be empty"),
               2: FailedPrecondition("schedule deleted")}[rec.offset]

    loop, consumer, dead, sleeps, health = await loop_for(handler, [record(0), record(1), record(2)])
    await loop.step(0)
    assert calls == 3 and sleeps.delays == []
    reasons = [headers["reason"] for _, headers in dead.sent]
    assert reasons == ["malformed: no id", "malformed: name: must not be empty",
                       "refused: FailedPrecondition: schedule deleted"]
    assert health.ready()


async def test_a_bug_is_tried_a_few_times_then_dead_lettered_so_the_partition_goes_on():
    handled: list[int] = []
    calls = 0

    async def handler(rec: Record) -> None:
        nonlocal calls
        if rec.offset == 0:
            calls += 1
            raise KeyError("a bug")
        handled.append(rec.offset)

    loop, consumer, dead, sleeps, health = await loop_for(handler, [record(0), record(1)])
    await loop.step(0)
    assert calls == MAX_ATTEMPTS and handled == [1]
    assert [headers["reason"] for _, headers in dead.sent] == ["handler failed: KeyError('a bug')"]
    assert health.ready()  # a bug is not an outage


def test_the_one_classification():
    assert all(is_infrastructure(error) for error in INFRASTRUCTURE)
    wrapped = RuntimeError("append failed")
    wrapped.__cause__ = EventLogUnavailable("down")
    assert is_infrastructure(wrapped)
    for error in (KeyError("x"), MalformedMessage("m"), InvalidArgument("f", "m"), ValueError("v"),
                  sqlite3.OperationalError("no such table: events"), sqlite3.IntegrityError("UNIQUE")):
        assert not is_infrastructure(error), error
    assert Backoff(0.1, 10.0).delay(1) == 0.1 and Backoff(0.1, 10.0).delay(1000) == 10.0


class FlakyProducer:
    """Fails its first `failures` sends as a broker outage would, then keeps what it is sent."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.sent = []

    async def send_batch(self, messages) -> None:
        if self.failures:
            self.failures -= 1
            raise ConnectionRefusedError("broker unreachable")
        self.sent += messages


async def test_the_outbox_waits_out_a_bus_outage_and_publishes_each_event_once(tmp_path):
    log = SqliteEventLog(tmp_path / "events.db")
    log.append_batch([StreamAppend(f"s-{i}", [NewEvent(f"e-{i}", "Happened", b"{}")], -1) for i in range(3)])
    health = Health()
    await health.recovered()
    sleeps = Sleeps(health)
    producer = FlakyProducer(failures=6)
    relay = OutboxRelay("r", log, producer, lambda event: [Outgoing("topic", event.stream, event.data)],
                        health=health, sleep=sleeps)
    assert await relay.publish_pending() == 3
    assert [dict(m.headers)[EVENT_ID_HEADER] for m in producer.sent] == [b"e-0", b"e-1", b"e-2"]
    assert [dict(m.headers)[RELAY_HEADER] for m in producer.sent] == [b"r"] * 3
    assert [int(dict(m.headers)[POSITION_HEADER]) for m in producer.sent] == [1, 2, 3]
    assert sleeps.delays == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 3.0])
    assert not any(sleeps.ready_while_waiting) and health.ready()
    log.close()
