"""One member's matcher (the in-process bus): notifications are decided as they are looked up, with no
matches topic between the stages, and each is counted once however it comes again: the same record
redelivered, or also as a MatchRequested the two stages left on the matches topic (a log both wrote)."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from sluice.bus.inprocess import InProcessBus
from sluice.bus.port import Record
from sluice.bus.topics import ALL_TOPICS, MATCHES, PARTITION_NOTIFICATIONS
from sluice.clock import SimulatedClock
from sluice.domain.common import Notification, PartitionCommitted, PartitionRef, ProgramRef
from sluice.domain.errors import InvalidArgument
from sluice.domain.matching import RECENT_PER_SCHEDULE, JobTriggered, NotificationMatched, ScheduleObserved
from sluice.domain.schedules import Schedule, schedule_id_for
from sluice.domain.triggers import PartitionTrigger
from sluice.eventlog.batched import expand_all
from sluice.eventlog.codec import EventTypes
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.runtime.outbox import POSITION_HEADER, RELAY_HEADER
from sluice.domain import matching
from sluice.wire.common import notification_to_proto
from sluice_services.matcher.fused import LookupAndMatch
from sluice_services.matcher.lookup import ScheduleLookup
from sluice_services.matcher.service import MatcherService
from sluice_services.registry.service import RegistryService

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 28, 9, tzinfo=timezone.utc)
PROGRAM = ProgramRef("experiments", "clickstream", "hourly_metrics")
TYPES = EventTypes(matching.EVENTS)


def schedule(name: str, count: int) -> Schedule:
    return Schedule(schedule_id_for(PROGRAM, name), name, PROGRAM,
                    PartitionTrigger("experiments", "clickstream", count), enabled=True)


def notification(hour: int) -> Notification:
    return Notification(f"n-{hour:02d}", T0, PartitionCommitted("experiments", "clickstream", (
        PartitionRef({"hour": f"{hour:02d}"}, f"/data/clickstream/{hour:02d}"),)))


def record(offset: int, value: Notification, headers: tuple = ()) -> Record:
    return Record(PARTITION_NOTIFICATIONS, 0, offset, b"partition:experiments.clickstream",
                  notification_to_proto(value).SerializeToString(), headers, 0)


class OneMember:
    def __init__(self, tmp_path, *schedules: Schedule) -> None:
        self.clock = SimulatedClock(T0)
        self.log = SqliteEventLog(tmp_path / "events.db", clock=self.clock)
        registry = RegistryService(self.log, self.clock)
        for each in schedules:
            registry.create(each)
        self.bus = InProcessBus(clock=self.clock)
        self.producer = self.bus.producer()
        self.lookup = ScheduleLookup(self.log, self.producer)
        self.matcher = MatcherService(self.log, self.clock)
        self.lookup.recover()
        self.matcher.recover()
        self.fused = LookupAndMatch(self.lookup, self.matcher)

    async def handle(self, *records: Record) -> None:
        await self.fused.apply([(r, self.fused.parse(r)) for r in records])

    def events(self, schedule_id: str) -> list:
        return [TYPES.decode(e) for e in expand_all(self.log.read_all(0, 100_000))
                if e.stream == matching.stream_name(schedule_id)]

    async def close(self) -> None:
        await self.producer.close()
        await self.bus.close()
        self.log.close()


async def test_a_notification_is_decided_for_every_interested_schedule_without_the_matches_topic(tmp_path):
    once, twice = schedule("every-hour", 1), schedule("every-two-hours", 2)
    member = OneMember(tmp_path, once, twice)
    try:
        await member.bus.create_topics(ALL_TOPICS)
        await member.handle(record(7, notification(1)))

        # the matcher never consumed the schedules topic: the lookup's definition came with the request
        first = member.events(once.id)
        assert [type(e) for e in first] == [ScheduleObserved, JobTriggered]
        assert [n.id for n in first[1].job.context.notifications] == ["n-01"]
        assert [type(e) for e in member.events(twice.id)] == [ScheduleObserved, NotificationMatched]
        assert member.log.read_checkpoint(f"matcher:{PARTITION_NOTIFICATIONS}:0") == 8  # its own position
        source = f"matcher:{PARTITION_NOTIFICATIONS}:0:from:{PARTITION_NOTIFICATIONS}:0"
        assert member.log.read_checkpoint(source) is None
        assert await member.bus.consumer("probe", [MATCHES]).poll(timeout=0) == []
    finally:
        await member.close()


async def test_a_redelivered_notification_is_counted_once(tmp_path):
    twice = schedule("every-two-hours", 2)
    member = OneMember(tmp_path, twice)
    try:
        await member.handle(record(0, notification(1)))
        await member.handle(record(0, notification(1)), record(1, notification(2)))  # the poll again, and one more

        events = member.events(twice.id)
        assert [type(e) for e in events] == [ScheduleObserved, NotificationMatched, JobTriggered]
        assert [n.id for n in events[-1].job.context.notifications] == ["n-01", "n-02"]
    finally:
        await member.close()


BURST = RECENT_PER_SCHEDULE + 4
"""More than a schedule's recent ids: only the recorded positions can tell these apart."""


def relayed(offset: int, hour: int) -> Record:
    """The outbox relay's notification: its name and the event's log position in the headers."""
    headers = ((RELAY_HEADER, b"launcher"), (POSITION_HEADER, str(100 + hour).encode()))
    return record(offset, notification(hour), headers)


async def through_the_stages(member: OneMember, records: list[Record], matches) -> None:
    """The first stage publishes each notification's MatchRequested, the second stage decides them."""
    await member.lookup.apply([(r, member.lookup.parse(r)) for r in records])
    handler = member.matcher.handlers()[MATCHES]
    while left := await matches.poll(timeout=0):
        await handler.apply([(r, handler.parse(r)) for r in left])


@pytest.mark.parametrize("again", ["the same records", "the relay's resend"])
@pytest.mark.parametrize("first", ["the two stages", "the one member"])
async def test_a_notification_both_compositions_see_is_decided_once(tmp_path, first, again):
    """A log the two stages wrote: the first stage published its MatchRequested records, then stopped before
    committing the notifications' offsets, and the one member reads them again (or, the other way round,
    records left on the matches topic after the one member decided them); "the relay's resend": the
    outbox relay sent them again under new offsets."""
    each = schedule("every-hour", 1)
    member = OneMember(tmp_path, each)
    try:
        await member.bus.create_topics(ALL_TOPICS)
        matches = member.bus.consumer("trigger-matcher", [MATCHES])
        records = [relayed(hour, hour) for hour in range(BURST)]
        second = records if again == "the same records" else [relayed(BURST + hour, hour) for hour in range(BURST)]
        if first == "the two stages":
            await through_the_stages(member, records, matches)
            await member.handle(*second)
        else:
            await member.handle(*records)
            await through_the_stages(member, second, matches)

        fired = [e for e in member.events(each.id) if isinstance(e, JobTriggered)]
        assert sorted(n.id for e in fired for n in e.job.context.notifications) == sorted(
            notification(hour).id for hour in range(BURST))
    finally:
        await member.close()


async def test_a_malformed_notification_is_refused_naming_the_field(tmp_path):
    member = OneMember(tmp_path, schedule("every-hour", 1))
    try:
        empty = Record(PARTITION_NOTIFICATIONS, 0, 0, b"k", b"\x0a\x04n-01", (), 0)  # an id and nothing else
        with pytest.raises(InvalidArgument, match="notification.time"):
            member.fused.parse(empty)
        with pytest.raises(InvalidArgument, match="not a protobuf Notification"):
            member.fused.parse(Record(PARTITION_NOTIFICATIONS, 0, 1, b"k", b"\xff\xfe", (), 0))
    finally:
        await member.close()
