"""The matcher records a consumed position with the events it caused: redeliveries, republished
notifications and resends have no effect. Fed through its bus handlers, as the lookup stage feeds it."""
from __future__ import annotations

from datetime import timedelta

from sluice.bus.topics import PARTITION_NOTIFICATIONS
from sluice.clock import SimulatedClock
from sluice.domain.common import Notification, PartitionCommitted, PartitionRef, ProgramRef
from sluice.domain.matching import JobTriggered
from sluice.domain.schedules import Schedule
from sluice.domain.triggers import PartitionTrigger
from sluice.eventlog.batched import expand_all
from sluice.eventlog.sqlite import SqliteEventLog
from sluice_services.matcher.service import MatcherService
from tests.support.matcher_inputs import MatcherInputs

CLOCK = SimulatedClock()
PROGRAM = ProgramRef("experiments", "clickstream", "hourly_metrics")


def schedule(name: str, count: int) -> Schedule:
    return Schedule(f"s-{name}", name, PROGRAM, PartitionTrigger("experiments", "clickstream", count), enabled=True)


def notification(notification_id: str) -> Notification:
    return Notification(notification_id, CLOCK.now(), PartitionCommitted(
        "experiments", "clickstream", (PartitionRef({"hour": notification_id}, f"/d/{notification_id}"),)))


def triggered(log) -> list[str]:
    return [r.stream for r in expand_all(log.read_all(0, 10_000)) if r.type == JobTriggered.__name__]


async def test_redelivered_offsets_and_resent_ids_have_no_effect(tmp_path):
    log = SqliteEventLog(tmp_path / "events.db", clock=CLOCK)
    inputs = MatcherInputs(MatcherService(log, CLOCK))
    await inputs.observe("s-one", schedule("one", 1))
    await inputs.observe("s-two", schedule("two", 2))

    before = log.head_position()
    first = inputs.match_records(notification("n-0"), PARTITION_NOTIFICATIONS, 0)
    await inputs.deliver(first)
    written = expand_all(log.read_all(before, 100))
    assert sorted((r.stream, r.type) for r in written) == [
        ("matcher-s-one", "JobTriggered"),  # count 1: created, matched and fired, one event
        ("matcher-s-two", "NotificationMatched")]  # count 2: the first match creates the job, one event
    for record in first:  # the source position, recorded per matches partition
        assert log.read_checkpoint(f"matcher:{record.topic}:{record.partition}:from:{PARTITION_NOTIFICATIONS}:0") == 1
    assert triggered(log) == ["matcher-s-one"]

    head = log.head_position()
    await inputs.deliver(first)                                    # the bus redelivers the same records
    await inputs.match(notification("n-0"), source_offset=0)       # the lookup stage republished it (new offsets)
    await inputs.match(notification("n-0"), source_offset=1)       # the producer resent n-0 (new offset, same id)
    assert log.head_position() == head

    CLOCK.advance(timedelta(minutes=1))
    restarted = MatcherService(log, CLOCK)
    restarted.recover()
    again = inputs.to(restarted)
    await again.deliver(first)                                     # redelivered after a restart: still nothing
    await again.match(notification("n-0"), source_offset=2)
    assert log.head_position() == head

    await again.match(notification("n-1"), source_offset=3)       # a new notification carries on where it was
    assert sorted(triggered(log)) == ["matcher-s-one", "matcher-s-one", "matcher-s-two"]
    log.close()
