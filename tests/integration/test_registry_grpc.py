"""The schedule-registry over real gRPC on loopback: create/get/list/enable/disable/delete, and bad input."""
from __future__ import annotations

import asyncio

import grpc
import pytest

from sluice.bus.inprocess import InProcessBus
from sluice.bus.topics import PARTITION_NOTIFICATIONS, PROGRAM_NOTIFICATIONS, SCHEDULES
from sluice.clock import SimulatedClock
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.runtime.service import run_services
from sluice.v1 import (
    notifications_pb2 as npb,
    notifications_pb2_grpc,
    schedules_pb2 as spb,
    schedules_pb2_grpc,
)
from sluice_services.composition import registry_spec

pytestmark = pytest.mark.integration


@pytest.fixture
async def server(tmp_path):
    log = SqliteEventLog(tmp_path / "events.db", clock=SimulatedClock())
    bus = InProcessBus()
    producer = bus.producer()
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()
    task = asyncio.create_task(run_services([registry_spec(log, SimulatedClock(), producer)], bus, log,
                                            on_ready=ready.set_result, stop=stop))
    port = await asyncio.wait_for(ready, 10)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    yield channel, bus, log
    await channel.close()
    stop.set()
    await task
    await producer.close()
    log.close()


def schedule(**changes) -> spb.Schedule:
    message = spb.Schedule(
        name="hourly", program=npb.ProgramRef(namespace="experiments", app="clickstream", program="hourly_metrics"),
        trigger=spb.Trigger(partition=spb.PartitionTrigger(namespace="experiments", dataset="clickstream", count=1)),
        properties={"experiment": "exp-42"})
    for path, value in changes.items():
        target = message
        *parents, leaf = path.split(".")
        for parent in parents:
            target = getattr(target, parent)
        setattr(target, leaf, value)
    return message


def with_trigger(**kind) -> spb.Schedule:
    message = schedule()
    message.trigger.CopyFrom(spb.Trigger(**kind))
    return message


def with_constraints(*constraints: spb.Constraint) -> spb.Schedule:
    message = schedule()
    message.constraints.extend(constraints)
    return message


async def create(channel, message):
    return await schedules_pb2_grpc.ScheduleRegistryStub(channel).CreateSchedule(spb.CreateScheduleRequest(schedule=message))


async def test_lifecycle_over_grpc(server):
    channel, bus, _ = server
    stub = schedules_pb2_grpc.ScheduleRegistryStub(channel)
    created = await create(channel, schedule())
    assert created.id and created.generation == 1 and not created.enabled
    assert (await stub.GetSchedule(spb.GetScheduleRequest(id=created.id))).name == "hourly"
    assert (await stub.EnableSchedule(spb.EnableScheduleRequest(id=created.id))).enabled
    listed = await stub.ListSchedules(spb.ListSchedulesRequest(namespace="experiments"))
    assert [s.name for s in listed.schedules] == ["hourly"]
    assert not (await stub.DisableSchedule(spb.DisableScheduleRequest(id=created.id))).enabled
    await stub.DeleteSchedule(spb.DeleteScheduleRequest(id=created.id))
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await stub.GetSchedule(spb.GetScheduleRequest(id=created.id))
    assert error.value.code() == grpc.StatusCode.NOT_FOUND

    consumer = bus.consumer("test", [SCHEDULES])
    changes = []
    while len(changes) < 4:
        records = await consumer.poll(timeout=5)
        assert records, "the outbox did not publish every schedule change"
        for record in records:
            change = spb.ScheduleChanged()
            change.ParseFromString(record.value)
            changes.append(("deleted" if change.deleted else change.schedule.enabled))
    assert changes == [False, True, False, "deleted"]
    await consumer.close()


async def test_creating_the_same_name_twice_is_already_exists(server):
    channel, _, _ = server
    await create(channel, schedule())
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await create(channel, schedule())
    assert error.value.code() == grpc.StatusCode.ALREADY_EXISTS


@pytest.mark.parametrize("message, field", [
    (schedule(**{"trigger.partition.dataset": ""}), "schedule.trigger.partition.dataset"),
    (schedule(**{"trigger.partition.count": 0}), "schedule.trigger.partition.count"),
    (schedule(**{"trigger.partition.count": -1}), "schedule.trigger.partition.count"),
    (schedule(name=""), "schedule.name"),
    (schedule(**{"program.app": ""}), "schedule.program.app"),
    (with_trigger(time=spb.TimeTrigger(cron="61 * * * *")), "schedule.trigger.time.cron"),
    (with_trigger(time=spb.TimeTrigger(cron="0 * * *")), "schedule.trigger.time.cron"),
    (with_trigger(time=spb.TimeTrigger(cron="0 2 * * *", zone="Europe/Atlantis")), "schedule.trigger.time.zone"),
    (with_trigger(time=spb.TimeTrigger(cron="0 2 * * *", zone="Europe")), "schedule.trigger.time.zone"),
    (with_trigger(time=spb.TimeTrigger(cron="0 2 * * *", zone="A" * 300)), "schedule.trigger.time.zone"),
    (with_trigger(**{"and": spb.AndTrigger()}), "schedule.trigger.and.all_of"),
    (with_trigger(program_status=spb.ProgramStatusTrigger(namespace="experiments", app="clickstream",
                                                          program="../x", count=1,
                                                          statuses=[npb.RunStatus.COMPLETED])),
     "schedule.trigger.program_status.program"),
    (with_constraints(spb.Constraint(time_window=spb.TimeWindowConstraint(start="02:00", end="02:00"))),
     "schedule.constraints[0].time_window.end"),
    (with_constraints(spb.Constraint(time_window=spb.TimeWindowConstraint(start="01:00", end="02:00",
                                                                          zone="Nowhere/City"))),
     "schedule.constraints[0].time_window.zone"),
    (with_constraints(spb.Constraint(concurrency=spb.ConcurrencyConstraint(max_running=1)),
                      spb.Constraint(delay=spb.DelayConstraint(seconds=-5))), "schedule.constraints[1].delay.seconds"),
    (with_constraints(spb.Constraint(concurrency=spb.ConcurrencyConstraint(max_running=0))),
     "schedule.constraints[0].concurrency.max_running"),
    (with_constraints(spb.Constraint(max_runs_per_window=spb.MaxRunsPerWindowConstraint(max_runs=1, unit="week"))),
     "schedule.constraints[0].max_runs_per_window.unit"),
    (with_constraints(spb.Constraint()), "schedule.constraints[0]"),
    (schedule(timeout_policy=7), "schedule.timeout_policy"),
    (schedule(misfire_policy=7), "schedule.misfire_policy"),
    (schedule(**{"catch_up.seconds": 0}), "schedule.catch_up"),
])
async def test_invalid_schedule_is_invalid_argument_naming_the_field(server, message, field):
    channel, _, log = server
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await create(channel, message)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.value.details().startswith(f"{field}:")
    assert log.head_position() == 0


@pytest.mark.parametrize("message, field", [
    (with_constraints(spb.Constraint(concurrency=spb.ConcurrencyConstraint(max_running=1, group="a " + "x" * 100_000))),
     "schedule.constraints[0].concurrency.group"),
    (with_constraints(spb.Constraint(time_window=spb.TimeWindowConstraint(start="\u20ac" * 100_000, end="02:00"))),
     "schedule.constraints[0].time_window.start"),
])
async def test_a_refusal_quoting_a_huge_value_still_reaches_the_client_naming_the_field(server, message, field):
    """The message quoted the whole value: over gRPC's 16 KiB of metadata the client got RESOURCE_EXHAUSTED
    "Stream removed" instead of the status."""
    channel, _, log = server
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await create(channel, message)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.value.details().startswith(f"{field}:") and len(error.value.details()) < 1100
    assert log.head_position() == 0


def _filtered_by(values: int) -> spb.Schedule:
    return with_trigger(partition=spb.PartitionTrigger(namespace="experiments", dataset="clickstream", count=1, filter={
        "marketplace": spb.AllowedValues(values=[f"{index:04}" + "x" * 1000 for index in range(values)])}))


async def test_a_schedule_too_big_for_the_bus_is_resource_exhausted_and_not_stored(server):
    """300 filter values of 1 KiB each are within the filter's limits, but the schedule's change (301 KB) was
    dead-lettered by the outbox (over 256 KiB): the schedule was created and the matcher never saw it."""
    channel, _, log = server
    stub = schedules_pb2_grpc.ScheduleRegistryStub(channel)
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await create(channel, _filtered_by(300))
    assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error.value.details().startswith("schedule: ") and "limit of 122880 bytes" in error.value.details()
    deploy = spb.DeployAppRequest(namespace="experiments", app="clickstream",
                                  programs=[spb.ProgramSpec(name="hourly_metrics")], schedules=[_filtered_by(300)])
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await stub.DeployApp(deploy)
    assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error.value.details().startswith("app.schedules[0]: ")
    assert log.head_position() == 0
    created = await create(channel, _filtered_by(100))
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await stub.UpdateSchedule(spb.UpdateScheduleRequest(schedule=_filtered_by(300)))
    assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert (await stub.GetSchedule(spb.GetScheduleRequest(id=created.id))).generation == 1


async def test_unknown_trigger_type_is_invalid_argument(server):
    channel, _, log = server
    message = schedule()
    message.ClearField("trigger")
    message.trigger.ParseFromString(bytes([0x4A, 0x00]))  # field 9: a trigger kind this server does not know
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await create(channel, message)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "schedule.trigger: unknown trigger type" in error.value.details()
    message.ClearField("trigger")
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await create(channel, message)
    assert error.value.details().startswith("schedule.trigger: a trigger is required")
    assert log.head_position() == 0


def partition_notification(**changes) -> npb.Notification:
    message = npb.Notification(id="n-1")
    message.time.GetCurrentTime()
    message.partition_committed.namespace = "experiments"
    message.partition_committed.dataset = "clickstream"
    message.partition_committed.partitions.add(key=[npb.KeyValue(name="hour", value="09")], location="/data/x", size_bytes=10, record_count=1)
    for path, value in changes.items():
        if value is None:
            message.ClearField(path) if "." not in path else getattr(message, path.split(".")[0]).ClearField(path.split(".")[1])
        else:
            setattr(getattr(message, path.split(".")[0]), path.split(".")[1], value) if "." in path else setattr(message, path, value)
    return message


@pytest.mark.parametrize("changes, field", [
    ({"id": ""}, "notification.id"),
    ({"time": None}, "notification.time"),
    ({"partition_committed": None}, "notification.payload"),
    ({"partition_committed.dataset": ""}, "notification.partition_committed.dataset"),
    ({"partition_committed.partitions": None}, "notification.partition_committed.partitions"),
])
async def test_malformed_notification_is_rejected_and_not_published(server, changes, field):
    channel, bus, _ = server
    stub = notifications_pb2_grpc.NotificationsStub(channel)
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await stub.Publish(npb.PublishNotificationRequest(notification=partition_notification(**changes)))
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.value.details().startswith(f"{field}:")
    consumer = bus.consumer("probe", [PARTITION_NOTIFICATIONS])
    assert await consumer.poll(timeout=0.2) == []
    await consumer.close()


def program_notification(**changes) -> npb.Notification:
    message = npb.Notification(id="n-2", program_status_changed=npb.ProgramStatusChanged(
        program=npb.ProgramRef(namespace="experiments", app="clickstream", program="hourly_metrics"), run_id="r-1",
        status=npb.COMPLETED))
    message.time.GetCurrentTime()
    for path, value in changes.items():
        setattr(message.program_status_changed if path != "id" else message, path, value)
    return message


@pytest.mark.parametrize("message, code, field", [
    (program_notification(status=99), grpc.StatusCode.INVALID_ARGUMENT, "notification.program_status_changed.status"),
    (program_notification(run_id="r" * 300_000), grpc.StatusCode.RESOURCE_EXHAUSTED, "notification"),
    (program_notification(job_id="j" * 300_000), grpc.StatusCode.RESOURCE_EXHAUSTED, "notification"),
    (partition_notification(id="n" * 300_000), grpc.StatusCode.RESOURCE_EXHAUSTED, "notification"),
])
async def test_a_notification_with_an_unknown_status_or_too_big_for_the_bus_is_refused_and_not_published(
        server, message, code, field):
    """An unknown status number was UNKNOWN (the ingest bridge retries that for ever); a notification whose
    ids took it over the bus limit was published, then dead-lettered unread by the matcher."""
    channel, bus, _ = server
    stub = notifications_pb2_grpc.NotificationsStub(channel)
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await stub.Publish(npb.PublishNotificationRequest(notification=message))
    assert error.value.code() == code
    assert error.value.details().startswith(f"{field}:")
    consumer = bus.consumer("probe", [PARTITION_NOTIFICATIONS, PROGRAM_NOTIFICATIONS])
    assert await consumer.poll(timeout=0.2) == []
    await consumer.close()


async def test_valid_notification_is_published_keyed_by_dataset(server):
    channel, bus, _ = server
    stub = notifications_pb2_grpc.NotificationsStub(channel)
    response = await stub.Publish(npb.PublishNotificationRequest(notification=partition_notification()))
    assert response.id == "n-1"
    consumer = bus.consumer("probe", [PARTITION_NOTIFICATIONS])
    records = await consumer.poll(timeout=2)
    assert [r.key for r in records] == [b"partition:experiments.clickstream"]
    await consumer.close()


@pytest.mark.parametrize("message, field", [
    (schedule(**{"program.app": "../.."}), "schedule.program.app"),
    (schedule(**{"program.app": "/tmp"}), "schedule.program.app"),
    (schedule(**{"program.program": "../x"}), "schedule.program.program"),
    (schedule(**{"program.namespace": "a/b"}), "schedule.program.namespace"),
    (schedule(name="x" * 129), "schedule.name"),
])
async def test_names_outside_the_identifier_rule_are_invalid_argument(server, message, field):
    """Issue 23, hole 2: a name that is not an identifier never reaches the launcher's apps dir."""
    channel, _, log = server
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await create(channel, message)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.value.details().startswith(f"{field}: must match [A-Za-z_][A-Za-z0-9_-]{{0,127}}")
    deploy = spb.DeployAppRequest(namespace="experiments", app="../..", programs=[spb.ProgramSpec(name="x")])
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await schedules_pb2_grpc.ScheduleRegistryStub(channel).DeployApp(deploy)
    assert error.value.details().startswith("app.name: must match")
    assert log.head_position() == 0


async def test_a_notification_naming_a_dataset_outside_the_rule_is_invalid_argument(server):
    channel, bus, _ = server
    stub = notifications_pb2_grpc.NotificationsStub(channel)
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await stub.Publish(npb.PublishNotificationRequest(
            notification=partition_notification(**{"partition_committed.dataset": "../clickstream"})))
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.value.details().startswith("notification.partition_committed.dataset: must match")
    consumer = bus.consumer("probe", [PARTITION_NOTIFICATIONS])
    assert await consumer.poll(timeout=0.2) == []
    await consumer.close()
