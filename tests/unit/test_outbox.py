"""The outbox relay saves its position at most every CHECKPOINT_SECONDS (at once after sending
notifications, and when it stops), and a relay started again publishes what was not saved."""
from __future__ import annotations

import asyncio

import pytest

from sluice.bus.port import Message
from sluice.bus.topics import JOBS, PARTITION_NOTIFICATIONS
from sluice.eventlog.port import ANY_VERSION, NewEvent, RecordedEvent
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.runtime.outbox import CHECKPOINT_SECONDS, OutboxRelay, Outgoing
from tests.support.waiting import until

CHECKPOINT = "outbox:test"


class Sent:
    def __init__(self) -> None:
        self.messages: list[Message] = []

    async def send(self, topic, value, *, key=None, headers=()):
        return (await self.send_batch([Message(topic, value, key, list(headers))]))[0]

    async def send_batch(self, messages):
        self.messages.extend(messages)
        return [(0, len(self.messages) - len(messages) + index) for index in range(len(messages))]

    async def close(self) -> None:
        pass


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def to(topic: str):
    def route(recorded: RecordedEvent) -> list[Outgoing]:
        return [Outgoing(topic, recorded.stream, recorded.data)]
    return route


def append(log: SqliteEventLog, *values: str) -> None:
    for value in values:
        log.append(f"s-{value}", [NewEvent(f"e-{value}", "Happened", value.encode())], ANY_VERSION)


@pytest.fixture
def log(tmp_path):
    log = SqliteEventLog(tmp_path / "events.db")
    yield log
    log.close()


async def test_the_position_is_saved_after_the_first_send_then_at_most_every_checkpoint_interval(log):
    clock, sent = Clock(), Sent()
    relay = OutboxRelay("test", log, sent, to(JOBS), monotonic=clock)
    append(log, "a")
    await relay.publish_pending()
    assert log.read_checkpoint(CHECKPOINT) == 1
    append(log, "b")
    clock.now += CHECKPOINT_SECONDS / 2
    await relay.publish_pending()
    assert log.read_checkpoint(CHECKPOINT) == 1  # not due yet
    append(log, "c")
    clock.now += CHECKPOINT_SECONDS / 2
    await relay.publish_pending()
    assert log.read_checkpoint(CHECKPOINT) == 3
    assert [m.value for m in sent.messages] == [b"a", b"b", b"c"]


async def test_notifications_are_followed_by_a_checkpoint_at_once(log):
    clock, sent = Clock(), Sent()
    relay = OutboxRelay("test", log, sent, to(PARTITION_NOTIFICATIONS), monotonic=clock)
    for position, value in enumerate("abc", start=1):
        append(log, value)
        await relay.publish_pending()
        assert log.read_checkpoint(CHECKPOINT) == position


async def test_a_relay_started_again_publishes_what_was_not_saved_and_nothing_before(log):
    clock = Clock()
    first = OutboxRelay("test", log, Sent(), to(JOBS), monotonic=clock)
    append(log, "a")
    await first.publish_pending()
    append(log, "b", "c")
    await first.publish_pending()  # sent, position not saved: then the process dies
    again = Sent()
    await OutboxRelay("test", log, again, to(JOBS), monotonic=clock).publish_pending()
    assert [m.value for m in again.messages] == [b"b", b"c"]


async def test_a_stopping_relay_saves_its_position(log):
    clock, sent = Clock(), Sent()
    relay = OutboxRelay("test", log, sent, to(JOBS), monotonic=clock)
    append(log, "a", "b")
    running = asyncio.create_task(relay.run())

    await until(lambda: len(sent.messages) == 2, "2 messages sent", timeout=5)
    append(log, "c")
    await until(lambda: len(sent.messages) == 3, "3 messages sent", timeout=5)
    assert len(sent.messages) == 3 and log.read_checkpoint(CHECKPOINT) == 2
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert log.read_checkpoint(CHECKPOINT) == 3
