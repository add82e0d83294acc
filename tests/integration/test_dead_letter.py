"""Malformed bus messages go to the dead-letter topic with the reason and the original bytes; the
consumer carries on with the next message."""
from __future__ import annotations

import asyncio

import pytest

from sluice.bus.inprocess import InProcessBus
from sluice.bus.kafka import KafkaBus
from sluice.bus.topics import DEAD_LETTER, JOBS, MATCHES, PARTITION_NOTIFICATIONS, SCHEDULES
from sluice.clock import SimulatedClock
from sluice.domain.common import Notification, PartitionCommitted, PartitionRef, ProgramRef
from sluice.domain.schedules import Schedule, schedule_id_for
from sluice.domain.triggers import PartitionTrigger
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.runtime.service import run_services
from tests.support.kafka import KafkaBroker
from sluice.v1 import jobs_pb2, matching_pb2, notifications_pb2, schedules_pb2
from sluice.wire.common import notification_to_proto
from sluice_services.composition import matcher_spec, registry_spec
from sluice_services.streams import schedule_recorded
from sluice_services.registry.service import RegistryService

pytestmark = pytest.mark.integration

CLOCK = SimulatedClock()
SCHEDULE = Schedule(schedule_id_for(ProgramRef("experiments", "clickstream", "hourly_metrics"), "hourly"), "hourly", ProgramRef("experiments", "clickstream", "hourly_metrics"),
                    PartitionTrigger("experiments", "clickstream", 1), enabled=True)


def valid_notification() -> bytes:
    notification = Notification("n-ok", CLOCK.now(), PartitionCommitted("experiments", "clickstream",
                                                                         (PartitionRef({"hour": "09"}, "/d/09"),)))
    return notification_to_proto(notification).SerializeToString()


def missing_fields() -> bytes:
    message = notifications_pb2.Notification(id="n-bad")
    message.time.GetCurrentTime()
    message.partition_committed.namespace = "experiments"
    return message.SerializeToString()


async def drain(bus, topic: str, count: int, settle: float) -> list:
    consumer = bus.consumer(f"probe-{topic}", [topic])
    records = []
    deadline = asyncio.get_running_loop().time() + settle
    while len(records) < count:
        assert asyncio.get_running_loop().time() < deadline, f"expected {count} records on {topic}, got {len(records)}"
        records += await consumer.poll(timeout=1)
    await consumer.close()
    return records


@pytest.mark.parametrize("one_member", [False, True], ids=["two-stages", "one-member"])
async def test_poison_messages_are_dead_lettered_and_the_matcher_carries_on(tmp_path, one_member):
    await poison_messages_are_dead_lettered(tmp_path, InProcessBus(), settle=5, one_member=one_member)


@pytest.mark.slow
async def test_poison_messages_on_a_real_kafka_broker(tmp_path):
    with KafkaBroker() as kafka:
        await poison_messages_are_dead_lettered(tmp_path, KafkaBus(kafka.bootstrap), settle=60)


async def poison_messages_are_dead_lettered(tmp_path, bus, settle: float, one_member: bool = False) -> None:
    """Not protobuf, another message type, missing fields, oversized, an unknown schedule, and an
    undecodable schedule change; then a valid notification still triggers."""
    log = SqliteEventLog(tmp_path / "events.db", clock=CLOCK)
    RegistryService(log, CLOCK).create(SCHEDULE)
    stop = asyncio.Event()
    ready = asyncio.get_running_loop().create_future()
    producer = bus.producer()
    specs = [registry_spec(log, CLOCK, producer), matcher_spec(log, CLOCK, producer, one_member=one_member)]
    task = asyncio.create_task(run_services(specs, bus, log, on_ready=ready.set_result, stop=stop))
    await asyncio.wait_for(ready, settle)
    deadline = asyncio.get_running_loop().time() + settle
    while not schedule_recorded(log, SCHEDULE.id):
        assert asyncio.get_running_loop().time() < deadline, "the matcher never observed the schedule"
        await asyncio.sleep(0.05)
    poison = {
        b"\xff\xfe not protobuf": "not a protobuf Notification",
        missing_fields(): "notification.partition_committed.dataset: must not be empty",
        notifications_pb2.Notification(id="n-empty").SerializeToString(): "notification.time: is required",
        schedules_pb2.DeployAppRequest(namespace="wrong-type").SerializeToString(): "notification",
        b"\x0a" + bytes(300 * 1024): "oversized: 307201 bytes > 262144",
    }
    for value in poison:
        await producer.send(PARTITION_NOTIFICATIONS, value, key=b"partition:experiments.clickstream")
    await producer.send(SCHEDULES, b"\x08\x96\x01 garbage", key=b"x")
    unknown = matching_pb2.MatchRequested(targets=[matching_pb2.MatchTarget(schedule_id="no-such-schedule")],
                                          notification=notifications_pb2.Notification.FromString(valid_notification()))
    await producer.send(MATCHES, unknown.SerializeToString(), key=b"no-such-schedule")
    await producer.send(PARTITION_NOTIFICATIONS, valid_notification(), key=b"partition:experiments.clickstream")

    dead = await drain(bus, DEAD_LETTER, len(poison) + 2, settle)
    reasons = {record.value: dict(record.headers)["reason"].decode() for record in dead}
    for value, reason in poison.items():
        assert reason in reasons[value]
    sources = {record.value: dict(record.headers)["source-topic"].decode() for record in dead}
    assert {sources[value] for value in poison} == {PARTITION_NOTIFICATIONS}
    assert sources[b"\x08\x96\x01 garbage"] == SCHEDULES
    assert sources[unknown.SerializeToString()] == MATCHES
    assert "unknown schedule no-such-schedule" in reasons[unknown.SerializeToString()]

    triggered = await drain(bus, JOBS, 1, settle)
    job = jobs_pb2.JobTriggered.FromString(triggered[0].value).job
    assert [n.id for n in job.context.notifications] == ["n-ok"]

    stop.set()
    await task
    await producer.close()
    await bus.close()
    log.close()
