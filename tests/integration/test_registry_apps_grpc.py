"""The registry's app RPCs over real gRPC on loopback: ListApps paged, a pause published on the schedules
topic for every schedule of the app, DeployApp into a paused app, and a pause kept across a restart."""
from __future__ import annotations

import asyncio

import grpc
import pytest

from sluice.bus.inprocess import InProcessBus
from sluice.bus.topics import SCHEDULES
from sluice.clock import SimulatedClock
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.runtime.service import run_services
from sluice.v1 import schedules_pb2 as spb, schedules_pb2_grpc
from sluice_services.composition import registry_spec
from tests.integration.test_registry_grpc import schedule

pytestmark = pytest.mark.integration


async def start(log, bus):
    producer = bus.producer()
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()
    task = asyncio.create_task(run_services([registry_spec(log, SimulatedClock(), producer)], bus, log,
                                            on_ready=ready.set_result, stop=stop))
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{await asyncio.wait_for(ready, 10)}")

    async def close():
        await channel.close()
        stop.set()
        await task
        await producer.close()
    return schedules_pb2_grpc.ScheduleRegistryStub(channel), close


@pytest.fixture
async def registry(tmp_path):
    log = SqliteEventLog(tmp_path / "events.db", clock=SimulatedClock())
    bus = InProcessBus()
    stub, close = await start(log, bus)
    yield stub, bus, log
    await close()
    log.close()


def in_app(app: str, name: str = "hourly", enabled: bool = True) -> spb.Schedule:
    message = schedule(name=name, enabled=enabled)
    message.program.app = app
    return message


async def test_list_apps_pages_in_order_and_refuses_a_bad_token(registry):
    stub, _, _ = registry
    for app in ("e", "a", "d", "b", "c"):
        await stub.CreateSchedule(spb.CreateScheduleRequest(schedule=in_app(app)))
    await stub.CreateSchedule(spb.CreateScheduleRequest(schedule=in_app("a", "second", enabled=False)))
    pages, token = [], ""
    while True:
        page = await stub.ListApps(spb.ListAppsRequest(namespace="experiments", page_size=2, page_token=token))
        pages.append([(a.app, a.schedules, a.enabled_schedules) for a in page.apps])
        token = page.next_page_token
        if not token:
            break
    assert pages == [[("a", 2, 1), ("b", 1, 1)], [("c", 1, 1), ("d", 1, 1)], [("e", 1, 1)]]
    assert not (await stub.ListApps(spb.ListAppsRequest(namespace="elsewhere"))).apps
    for request, field in ((spb.ListAppsRequest(page_token="not a token"), "page_token"),
                           (spb.ListAppsRequest(page_size=-1), "page_size"),
                           (spb.ListAppsRequest(namespace="a/b"), "namespace")):
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await stub.ListApps(request)
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT and field in error.value.details()


async def test_a_pause_is_published_for_every_schedule_of_the_app(registry):
    stub, bus, _ = registry
    for name in ("one", "two"):
        await stub.CreateSchedule(spb.CreateScheduleRequest(schedule=in_app("paused_app", name)))
    await stub.CreateSchedule(spb.CreateScheduleRequest(schedule=in_app("other_app", "three")))
    response = await stub.PauseApp(spb.PauseAppRequest(namespace="experiments", app="paused_app"))
    assert response.changed and response.schedules == 2
    consumer = bus.consumer("test", [SCHEDULES])
    changes = []
    while len(changes) < 5:
        records = await consumer.poll(timeout=5)
        assert records, "the outbox did not publish every schedule change"
        for record in records:
            change = spb.ScheduleChanged.FromString(record.value)
            changes.append((change.schedule.name, change.schedule.enabled, change.schedule.paused))
    await consumer.close()
    assert changes[3:] == [("one", True, True), ("two", True, True)]


async def test_a_deployment_into_a_paused_app_and_a_restart_keep_the_pause(tmp_path):
    log = SqliteEventLog(tmp_path / "events.db", clock=SimulatedClock())
    bus = InProcessBus()
    stub, close = await start(log, bus)
    await stub.PauseApp(spb.PauseAppRequest(namespace="experiments", app="clickstream"))
    deploy = spb.DeployAppRequest(namespace="experiments", app="clickstream",
                                  programs=[spb.ProgramSpec(name="hourly_metrics")], schedules=[schedule(enabled=True)])
    assert list((await stub.DeployApp(deploy)).created) == ["hourly"]
    listed = await stub.ListSchedules(spb.ListSchedulesRequest(namespace="experiments"))
    assert [(s.name, s.enabled, s.paused) for s in listed.schedules] == [("hourly", True, True)]
    await close()

    stub, close = await start(log, bus)
    app = await stub.GetApp(spb.GetAppRequest(namespace="experiments", app="clickstream"))
    assert app.paused and app.deployed and [p.name for p in app.programs] == ["hourly_metrics"]
    other = schedule(name="later")
    created = await stub.CreateSchedule(spb.CreateScheduleRequest(schedule=other))
    assert created.paused
    resumed = await stub.ResumeApp(spb.PauseAppRequest(namespace="experiments", app="clickstream"))
    assert resumed.changed and resumed.schedules == 2
    await close()
    log.close()


@pytest.mark.parametrize("request_, field", [(spb.GetAppRequest(namespace="experiments"), "app"),
                                             (spb.GetAppRequest(app="x"), "namespace")])
async def test_get_app_names_the_missing_field(registry, request_, field):
    stub, _, _ = registry
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await stub.GetApp(request_)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT and error.value.details().startswith(field)
