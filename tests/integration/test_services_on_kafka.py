"""The same service code on a real Kafka broker: registry, matcher and checker over KafkaBus.
A schedule created over gRPC and a notification published over gRPC end in a launch request."""
from __future__ import annotations

import asyncio

import grpc
import pytest

from sluice.bus.kafka import KafkaBus
from sluice.bus.topics import LAUNCH_REQUESTS
from sluice.clock import SystemClock
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.runtime.service import run_services
from tests.support.kafka import KafkaBroker
from sluice.v1 import (
    jobs_pb2,
    notifications_pb2 as npb,
    notifications_pb2_grpc,
    schedules_pb2 as spb,
    schedules_pb2_grpc,
)
from sluice_services.composition import checker_spec, matcher_spec, registry_spec

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def kafka():
    with KafkaBroker() as broker:
        yield broker


async def test_partition_notification_becomes_a_launch_request_over_kafka(kafka, tmp_path):
    clock = SystemClock()
    log = SqliteEventLog(tmp_path / "events.db", clock=clock)
    bus = KafkaBus(kafka.bootstrap)
    producer = bus.producer()
    ready = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()
    specs = [registry_spec(log, clock, producer), matcher_spec(log, clock, producer), checker_spec(log, clock)]
    services = asyncio.create_task(run_services(specs, bus, log, on_ready=ready.set_result, stop=stop))
    try:
        port = await asyncio.wait_for(ready, 60)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            schedule = spb.Schedule(
                name="hourly", enabled=True,
                program=npb.ProgramRef(namespace="experiments", app="clickstream", program="hourly_metrics"),
                trigger=spb.Trigger(partition=spb.PartitionTrigger(namespace="experiments", dataset="clickstream", count=1)))
            created = await schedules_pb2_grpc.ScheduleRegistryStub(channel).CreateSchedule(
                spb.CreateScheduleRequest(schedule=schedule))
            consumer = bus.consumer("test-launches", [LAUNCH_REQUESTS])
            notification = npb.Notification(id="kafka-n-1")
            notification.time.GetCurrentTime()
            notification.partition_committed.namespace = "experiments"
            notification.partition_committed.dataset = "clickstream"
            notification.partition_committed.partitions.add(key=[npb.KeyValue(name="hour", value="09")], location="/d/09")
            # The matcher may not have consumed the schedule yet: resend (same id, deduplicated) until a job exists.
            launches = []
            for _ in range(60):
                await notifications_pb2_grpc.NotificationsStub(channel).Publish(
                    npb.PublishNotificationRequest(notification=notification))
                launches += await consumer.poll(timeout=1)
                if launches:
                    break
            assert launches, "no launch request reached the launch-requests topic"
            await asyncio.sleep(2)
            launches += await consumer.poll(timeout=1)
            jobs = [jobs_pb2.LaunchRequested.FromString(r.value).job for r in launches]
            assert len(jobs) == 1, "a resent notification launched twice"
            assert jobs[0].schedule_id == created.id
            assert [n.id for n in jobs[0].context.notifications] == ["kafka-n-1"]
            assert launches[0].key == jobs[0].id.encode()
            await consumer.close()
    finally:
        stop.set()
        await services
        await producer.close()
        await bus.close()
        log.close()
