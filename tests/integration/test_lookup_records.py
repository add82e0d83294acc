"""The first stage's MatchRequested records carry the notification exactly as it was published,
with its source position and the interested schedules of the record's matches partition."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from sluice.bus.inprocess import InProcessBus
from sluice.bus.port import Record, kafka_partition
from sluice.bus.topics import ALL_TOPICS, MATCHES, MATCHES_PARTITIONS, PARTITION_NOTIFICATIONS
from sluice.domain.common import Notification, PartitionCommitted, PartitionRef, ProgramRef
from sluice.domain.schedules import Schedule
from sluice.domain.triggers import PartitionTrigger
from sluice.v1 import matching_pb2
from sluice.wire.common import notification_from_proto, notification_to_proto
from sluice_services.matcher.lookup import ScheduleLookup
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
