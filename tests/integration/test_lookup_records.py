"""The first stage's MatchRequested records carry the notification exactly as it was published,
with its source position and the interested schedules of the record's matches partition."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from sluice.bus.inprocess import InProcessBus
from sluice.clock import SimulatedClock
from sluice.domain.bounds import MAX_BUS_MESSAGE_BYTES
from sluice.domain.matching import JobTriggered
from sluice.eventlog.batched import expand_all
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.bus.port import Record, kafka_partition
from sluice.bus.topics import ALL_TOPICS, MATCHES, MATCHES_PARTITIONS, PARTITION_NOTIFICATIONS
from sluice.domain.common import Notification, PartitionCommitted, PartitionRef, ProgramRef
from sluice.domain.schedules import Schedule, schedule_id_for
from sluice.domain.triggers import PartitionTrigger
from sluice.v1 import matching_pb2
from sluice.wire.common import notification_from_proto, notification_to_proto
from sluice_services.matcher.lookup import ScheduleLookup
from sluice_services.matcher.service import STREAM_PREFIX, TYPES, MatcherService
from sluice_services.registry.service import RegistryService
from tests.support.simulated import SimulatedScheduler

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 23, tzinfo=timezone.utc)


async def test_a_notification_reaches_every_interested_schedule_as_published(tmp_path) -> None:
    scheduler = SimulatedScheduler(tmp_path, T0)
    try:
        ids = [(await scheduler.create(Schedule("", f"on-clicks-{n}", ProgramRef("ns", "app", "wf"),
                                                PartitionTrigger("ns", "clicks", 1), {}, enabled=True))).id
               for n in range(12)]
        bus = InProcessBus()
        await bus.create_topics(ALL_TOPICS)
        lookup = ScheduleLookup(scheduler.log, bus.producer())
        lookup.recover()
        notification = Notification("n-1", T0, PartitionCommitted("ns", "clicks", (
            PartitionRef({"hour": "07", "part": "0"}, "/data/clicks/07/0", 2_000_000, 1_500, {"format": "parquet"}),)))
        value = notification_to_proto(notification).SerializeToString()
        record = Record(PARTITION_NOTIFICATIONS, 2, 1_234, b"partition:ns.clicks", value, (), 0)
        await lookup.apply([(record, lookup.parse(record))])

        consumer = bus.consumer("test", [MATCHES])
        published = await consumer.poll(timeout=1.0)
        requests = [matching_pb2.MatchRequested.FromString(r.value) for r in published]
        assert {t.schedule_id for m in requests for t in m.targets} == set(ids)
        for record_out, message in zip(published, requests):
            assert {kafka_partition(t.schedule_id.encode(), MATCHES_PARTITIONS) for t in message.targets} == {
                record_out.partition}
            assert message.notification.SerializeToString() == value
            assert notification_from_proto(message.notification) == notification
            assert (message.source.topic, message.source.partition, message.source.offset) == (
                PARTITION_NOTIFICATIONS, 2, 1_234)
    finally:
        scheduler.close()


async def test_schedules_too_large_for_one_record_together_all_match_the_notification(tmp_path) -> None:
    """20 schedules of ~60 KB of properties on one dataset: their definitions beside the notification would
    make records of ~300 KB, which consumers dead-letter unread (every schedule would miss it). Each record
    stays under the bus limit, those that do not fit named by their generation, and the second stage, which
    has not seen the schedules on the schedules topic, reads those from the registry's streams."""
    clock = SimulatedClock(T0)
    log = SqliteEventLog(tmp_path / "events.db", clock=clock)
    bus = InProcessBus(clock=clock)
    producer = bus.producer()
    try:
        await bus.create_topics(ALL_TOPICS)
        registry = RegistryService(log, clock)
        properties = {f"key-{n:03d}": "v" * 590 for n in range(100)}
        ids = {registry.create(_schedule(f"big-{n:02d}", properties)).id for n in range(20)}
        lookup = ScheduleLookup(log, producer)
        lookup.recover()
        notification = Notification("n-1", T0, PartitionCommitted("ns", "clicks", (
            PartitionRef({"hour": "07"}, "/data/clicks/07"),)))
        record = Record(PARTITION_NOTIFICATIONS, 0, 5, b"partition:ns.clicks",
                        notification_to_proto(notification).SerializeToString(), (), 0)
        await lookup.apply([(record, lookup.parse(record))])

        published = await bus.consumer("test", [MATCHES]).poll(timeout=1.0)
        assert max(len(r.value) for r in published) <= MAX_BUS_MESSAGE_BYTES
        targets = [t for r in published for t in matching_pb2.MatchRequested.FromString(r.value).targets]
        assert {t.schedule_id for t in targets} == ids
        by_reference = [t for t in targets if not t.HasField("schedule")]
        assert by_reference and all(t.generation == 1 for t in by_reference)

        matcher = MatcherService(log, clock)
        matcher.recover()
        handler = matcher.handlers()[MATCHES]
        await handler.apply([(r, handler.parse(r)) for r in published])
        fired = {event.job.schedule_id for event in (TYPES.decode(e) for e in expand_all(log.read_all(0, 100_000))
                                                     if e.stream.startswith(STREAM_PREFIX))
                 if isinstance(event, JobTriggered)}
        assert fired == ids
    finally:
        await producer.close()
        await bus.close()
        log.close()


async def test_a_schedule_named_by_generation_and_deleted_since_is_not_matched(tmp_path) -> None:
    clock = SimulatedClock(T0)
    log = SqliteEventLog(tmp_path / "events.db", clock=clock)
    try:
        registry = RegistryService(log, clock)
        kept, deleted = (registry.create(_schedule(name)) for name in ("kept", "deleted"))
        registry.delete(deleted.id)
        matcher = MatcherService(log, clock)
        matcher.recover()
        message = matching_pb2.MatchRequested(
            notification=notification_to_proto(Notification("n-1", T0, PartitionCommitted("ns", "clicks", (
                PartitionRef({"hour": "07"}, "/data/clicks/07"),)))),
            targets=[matching_pb2.MatchTarget(schedule_id=kept.id, generation=1),
                     matching_pb2.MatchTarget(schedule_id=deleted.id, generation=1)])
        parsed = matcher.parse_match_requested(Record(MATCHES, 0, 0, kept.id.encode(), message.SerializeToString(),
                                                      (), 0))
        assert [(r.schedule_id, r.schedule.name) for r in parsed.requests] == [(kept.id, "kept")]
    finally:
        log.close()


def _schedule(name: str, properties: dict[str, str] | None = None) -> Schedule:
    program = ProgramRef("ns", "app", "wf")
    return Schedule(schedule_id_for(program, name), name, program, PartitionTrigger("ns", "clicks", 1),
                    properties or {}, enabled=True)
