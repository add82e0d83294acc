"""The matcher records a consumed offset with the events it caused: redeliveries and resends have no effect."""
from __future__ import annotations

from datetime import timedelta

from sluice.bus.port import Record
from sluice.bus.topics import PARTITION_NOTIFICATIONS
from sluice.clock import SimulatedClock
from sluice.domain.common import Notification, PartitionCommitted, PartitionRef, ProgramRef
from sluice.domain.matching import JobTriggered
from sluice.domain.schedules import Schedule
from sluice.domain.triggers import PartitionTrigger
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.wire.common import notification_to_proto
from sluice_services.matcher.service import MatcherService

CLOCK = SimulatedClock()
PROGRAM = ProgramRef("experiments", "clickstream", "hourly_metrics")


def schedule(name: str, count: int) -> Schedule:
    return Schedule(f"s-{name}", name, PROGRAM, PartitionTrigger("experiments", "clickstream", count), enabled=True)


def record(offset: int, notification_id: str) -> Record:
    notification = Notification(notification_id, CLOCK.now(), PartitionCommitted(
        "experiments", "clickstream", (PartitionRef({"hour": notification_id}, f"/d/{notification_id}"),)))
    return Record(PARTITION_NOTIFICATIONS, 0, offset, b"partition:experiments.clickstream",
                  notification_to_proto(notification).SerializeToString(), (), 0)


def triggered(log) -> list[str]:
    return [r.stream for r in log.read_all(0, 10_000) if r.type == JobTriggered.__name__]


async def test_redelivered_offsets_and_resent_ids_have_no_effect(tmp_path):
    log = SqliteEventLog(tmp_path / "events.db", clock=CLOCK)
    matcher = MatcherService(log, CLOCK)
    matcher.observe("s-one", schedule("one", 1))
    matcher.observe("s-two", schedule("two", 2))

    before = log.head_position()
    await matcher.on_notification(record(0, "n-0"))
    written = log.read_all(before, 100)
    assert [(r.stream, r.type) for r in written] == [
        ("matcher-s-one", "JobTriggered"),  # count 1: created, matched and fired, one event
        ("matcher-s-two", "JobCreated"), ("matcher-s-two", "NotificationMatched")]
    assert log.read_checkpoint(f"matcher:{PARTITION_NOTIFICATIONS}:0") == 1
    assert triggered(log) == ["matcher-s-one"]

    head = log.head_position()
    await matcher.on_notification(record(0, "n-0"))      # the bus redelivers offset 0
    await matcher.on_notification(record(1, "n-0"))      # the producer resent n-0 (new offset, same id)
    assert log.head_position() == head

    CLOCK.advance(timedelta(minutes=1))
    restarted = MatcherService(log, CLOCK)
    restarted.recover()
    await restarted.on_notification(record(0, "n-0"))    # redelivered after a restart: still nothing
    await restarted.on_notification(record(2, "n-0"))
    assert log.head_position() == head

    await restarted.on_notification(record(3, "n-1"))    # a new notification carries on where it was
    assert sorted(triggered(log)) == ["matcher-s-one", "matcher-s-one", "matcher-s-two"]
    log.close()
