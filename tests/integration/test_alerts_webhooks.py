"""Alerts against a real HTTP receiver (an aiohttp server on a free loopback port): an SLA miss and a
failed run each deliver exactly one webhook call, also when the receiver answers 500 first; a restart
between a delivery's request and its delivery sends it once; SLA deadlines on the simulated clock (no
sleeping for a deadline); hostile policies refused over gRPC with INVALID_ARGUMENT naming the field."""
from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone

import grpc
import pytest
from aiohttp import web

from sluice.bus.inprocess import InProcessBus
from sluice.bus.port import Record
from sluice.bus.topics import PROGRAM_NOTIFICATIONS, SCHEDULES
from sluice.clock import SimulatedClock
from sluice.domain.alerts.messages import MAX_RETRY
from sluice.domain.alerts.policy import AlertPolicy, CompleteBy
from sluice.domain.alerts.watch import NOTICE_GRACE
from sluice.domain.common import Notification, ProgramRef, ProgramStatusChanged, RunStatus
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.runtime.metrics import Registry
from sluice.runtime.service import run_services
from sluice.v1 import alerts_pb2, alerts_pb2_grpc, schedules_pb2
from sluice.wire.common import notification_to_proto
from sluice_services.alerts.service import AlertsService
from sluice_services.alerts.webhooks import AiohttpSender, SendOutcome
from sluice_services.composition import alerts_spec
from tests.support.waiting import until

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 26, 3, 0, tzinfo=timezone.utc)  # 04:00 in Berlin; the SLA's deadline is 05:00 UTC
PROGRAM = ProgramRef("ns", "app", "daily")


class Receiver:
    """Counts the POSTs it gets; answers 500 to the first `fail_first` of them."""

    def __init__(self, fail_first: int = 0) -> None:
        self.fail_first = fail_first
        self.calls: list[tuple[int, str, dict]] = []  # (status answered, Idempotency-Key, body)

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        answer = 500 if len(self.calls) < self.fail_first else 200
        self.calls.append((answer, request.headers.get("Idempotency-Key", ""), body))
        return web.Response(status=answer, text="ok" if answer == 200 else "boom")

    @property
    def successful(self) -> list[tuple[int, str, dict]]:
        return [call for call in self.calls if call[0] == 200]


@pytest.fixture
async def receiver_factory():
    runners = []

    async def start(fail_first: int = 0) -> tuple[Receiver, str]:
        receiver = Receiver(fail_first)
        app = web.Application()
        app.router.add_post("/hooks/{token}", receiver.handle)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)  # a free port
        await site.start()
        runners.append(runner)
        port = runner.addresses[0][1]
        return receiver, f"http://127.0.0.1:{port}/hooks/secret-token"

    yield start
    for runner in runners:
        await runner.cleanup()


def status_record(status: RunStatus, run_id: str = "r-1", offset: int = 0) -> Record:
    notification = Notification(f"n-{run_id}-{status.value}", T0, ProgramStatusChanged(PROGRAM, run_id, status, "s-1", "j-1"))
    return Record(PROGRAM_NOTIFICATIONS, 0, offset, b"k", notification_to_proto(notification).SerializeToString(), (), 0)


async def test_an_sla_miss_on_the_simulated_clock_delivers_exactly_one_webhook_call(tmp_path, receiver_factory):
    receiver, url = await receiver_factory()
    clock = SimulatedClock(T0)
    log = SqliteEventLog(tmp_path / "events.db", clock=clock)
    alerts = AlertsService(log, clock)
    alerts.recover()
    alerts.set_policy(AlertPolicy("s-1", CompleteBy("06:00", "Europe/Berlin"), (url,)))
    clock.advance(timedelta(minutes=120) + NOTICE_GRACE - timedelta(seconds=1))  # the deadline, and its grace but 1 s
    assert alerts.fire_due() == 0 and await alerts.deliver_due() == 0
    clock.advance(timedelta(seconds=1))
    assert alerts.fire_due() == 1
    assert await alerts.deliver_due() == 1
    assert await alerts.deliver_due() == 0 and alerts.fire_due() == 0
    (answered, key, body), = receiver.calls
    assert answered == 200 and key and body["sluice"]["event"] == "sla_missed"
    assert body["sluice"]["deadline"] == "2026-11-26T05:00:00Z" and body["text"]
    assert [m.deadline for m in alerts.state.misses] == [datetime(2026, 11, 26, 5, tzinfo=timezone.utc)]
    await alerts.close()
    log.close()


async def test_a_failed_run_is_retried_after_a_500_then_delivered_once(tmp_path, receiver_factory):
    receiver, url = await receiver_factory(fail_first=1)
    clock = SimulatedClock(T0)
    log = SqliteEventLog(tmp_path / "events.db", clock=clock)
    metrics = Registry()
    alerts = AlertsService(log, clock, jitter=lambda: 0.5)
    alerts.instrument(metrics)
    alerts.recover()
    alerts.set_policy(AlertPolicy("s-1", None, (url,)))
    await alerts.apply([(status_record(RunStatus.FAILED), AlertsService.parse_program_status(status_record(RunStatus.FAILED)))])
    assert await alerts.deliver_due() == 0  # the receiver answered 500
    assert await alerts.deliver_due() == 0  # not due again before its backoff
    clock.advance(MAX_RETRY)
    assert await alerts.deliver_due() == 1
    clock.advance(MAX_RETRY)
    assert await alerts.deliver_due() == 0
    assert [answered for answered, _, _ in receiver.calls] == [500, 200]
    assert len(receiver.successful) == 1 and len({key for _, key, _ in receiver.calls}) == 1  # one Idempotency-Key
    assert receiver.successful[0][2]["sluice"]["run_id"] == "r-1"
    exposition = metrics.render()
    assert 'sluice_webhook_deliveries_total{outcome="failed"} 1.0' in exposition
    assert 'sluice_webhook_deliveries_total{outcome="delivered"} 1.0' in exposition
    assert 'sluice_webhook_deliveries_total{outcome="abandoned"} 0.0' in exposition
    await alerts.close()
    log.close()


async def test_a_restart_between_request_and_delivery_sends_it_once(tmp_path, receiver_factory):
    receiver, url = await receiver_factory()
    clock = SimulatedClock(T0)
    log = SqliteEventLog(tmp_path / "events.db", clock=clock)
    before = AlertsService(log, clock)
    before.recover()
    before.set_policy(AlertPolicy("s-1", None, (url,)))
    record = status_record(RunStatus.LOST)
    await before.apply([(record, AlertsService.parse_program_status(record))])
    assert len(before.state.deliveries) == 1 and receiver.calls == []  # the service stops before delivering
    await before.close()

    after = AlertsService(log, clock)
    after.recover()
    await after.apply([(record, AlertsService.parse_program_status(record))])  # the bus redelivers: consumed already
    assert await after.deliver_due() == 1
    await after.close()
    again = AlertsService(log, clock)
    again.recover()
    assert len(again.state.deliveries) == 0 and await again.deliver_due() == 0
    await again.close()
    assert len(receiver.calls) == 1 and receiver.calls[0][2]["sluice"]["status"] == "LOST"
    log.close()


async def test_a_receiver_that_is_down_leaves_the_delivery_pending_for_its_retry(tmp_path, receiver_factory):
    receiver, url = await receiver_factory()
    closed = url.replace(url.split(":")[2].split("/")[0], str(_closed_port()))
    clock = SimulatedClock(T0)
    log = SqliteEventLog(tmp_path / "events.db", clock=clock)
    alerts = AlertsService(log, clock)
    alerts.recover()
    alerts.set_policy(AlertPolicy("s-1", None, (closed, url)))
    record = status_record(RunStatus.FAILED)
    await alerts.apply([(record, AlertsService.parse_program_status(record))])
    assert await alerts.deliver_due() == 1  # the receiver that is up got its call; the other is retried later
    (pending,) = alerts.state.deliveries.values()
    assert pending.url == closed and pending.attempts == 1 and pending.last_error.startswith("ClientConnector")
    assert "hooks" not in pending.last_error  # the URL's path (a secret) is not in the recorded error
    assert len(receiver.calls) == 1
    await alerts.close()
    log.close()


async def test_a_receiver_answering_200_with_an_endless_body_has_its_delivery_delivered():
    """The status is the answer: a body that never ends is not read into memory until the timeout (which would
    make a delivered call count as failed, and be sent again)."""
    async def endless(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=200)
        await response.prepare(request)
        chunk = b"x" * 65536
        while True:
            await response.write(chunk)

    app = web.Application()
    app.router.add_post("/hooks/endless", endless)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    sender = AiohttpSender(timeout_seconds=5)
    try:
        outcome = await sender.post(f"http://127.0.0.1:{runner.addresses[0][1]}/hooks/endless", "{}", "d-1")
        assert outcome == SendOutcome(True, "HTTP 200")
    finally:
        await sender.close()
        await runner.cleanup()


def _closed_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # closed again once the probe is


@pytest.fixture
async def alerts_server(tmp_path):
    clock = SimulatedClock(T0)
    log = SqliteEventLog(tmp_path / "events.db", clock=clock)
    bus = InProcessBus()
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()
    task = asyncio.create_task(run_services([alerts_spec(log, clock)], bus, log, on_ready=ready.set_result, stop=stop))
    port = await asyncio.wait_for(ready, 10)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    yield alerts_pb2_grpc.AlertsStub(channel), bus, clock
    await channel.close()
    stop.set()
    await task
    log.close()


@pytest.mark.parametrize("policy, field", [
    ({"schedule_id": "s-1", "webhooks": ["file:///etc/passwd"]}, "policy.webhooks[0]"),
    ({"schedule_id": "s-1", "webhooks": ["https://user:hunter2@example.com/x"]}, "policy.webhooks[0]"),
    ({"schedule_id": "s-1", "webhooks": [f"https://example.com/{i}" for i in range(6)]}, "policy.webhooks"),
    ({"schedule_id": "s-1", "webhooks": ["https://example.com/" + "x" * 5000]}, "policy.webhooks[0]"),
    ({"schedule_id": "../s", "webhooks": ["https://example.com/x"]}, "policy.schedule_id"),
    ({"schedule_id": "s-1", "webhooks": ["https://example.com/x"],
      "sla": {"complete_by": {"time_of_day": "25:00", "zone": "Europe/Berlin"}}}, "policy.sla.complete_by.time_of_day"),
    ({"schedule_id": "s-1", "webhooks": ["https://example.com/x"],
      "sla": {"complete_by": {"time_of_day": "06:00", "zone": "Nowhere/City"}}}, "policy.sla.complete_by.zone"),
    ({"schedule_id": "s-1", "webhooks": ["https://example.com/x"], "sla": {"within_minutes": -5}}, "policy.sla.within_minutes"),
    ({"schedule_id": "s-1", "webhooks": ["https://example.com/x"], "on": [7]}, "policy.on[0]"),
])
async def test_hostile_policies_are_refused_with_invalid_argument_naming_the_field(alerts_server, policy, field):
    stub, _, _ = alerts_server
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.SetAlertPolicy(alerts_pb2.SetAlertPolicyRequest(policy=alerts_pb2.AlertPolicy(**_sla(policy))))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.details().startswith(field + ":")
    assert "hunter2" not in refused.value.details()


def _sla(policy: dict) -> dict:
    fields = dict(policy)
    if "sla" in fields:
        sla = fields.pop("sla")
        fields["sla"] = alerts_pb2.Sla(complete_by=alerts_pb2.CompleteBy(**sla["complete_by"])) if "complete_by" in sla \
            else alerts_pb2.Sla(within_minutes=sla["within_minutes"])
    return fields


async def test_over_grpc_and_the_bus_a_failed_run_reaches_the_receiver_once_and_a_miss_is_listed(alerts_server,
                                                                                                  receiver_factory):
    stub, bus, clock = alerts_server
    receiver, url = await receiver_factory()
    change = schedules_pb2.ScheduleChanged(schedule_id="s-1")
    change.schedule.name = "daily"
    change.schedule.trigger.time.cron, change.schedule.trigger.time.zone = "0 * * * *", "UTC"
    change.schedule.program.namespace, change.schedule.program.app, change.schedule.program.program = "ns", "app", "daily"
    producer = bus.producer()
    await producer.send(SCHEDULES, change.SerializeToString(), key=b"s-1")
    policy = alerts_pb2.AlertPolicy(schedule_id="s-1", webhooks=[url], sla=alerts_pb2.Sla(
        complete_by=alerts_pb2.CompleteBy(time_of_day="06:00", zone="Europe/Berlin")))
    answer = await stub.SetAlertPolicy(alerts_pb2.SetAlertPolicyRequest(policy=policy))
    assert list(answer.webhooks) == [url.split("/hooks")[0] + "/…"]  # the path (a secret) is not shown
    assert answer.next_deadline.ToDatetime(timezone.utc) == datetime(2026, 11, 26, 5, tzinfo=timezone.utc)

    record = status_record(RunStatus.FAILED)
    await producer.send(PROGRAM_NOTIFICATIONS, record.value, key=b"program:ns.app.daily.FAILED")
    await until(lambda: len(receiver.calls) == 1, "the first webhook call", timeout=10)
    (_, _, body), = receiver.calls
    assert body["sluice"]["schedule_id"] == "s-1" and body["sluice"]["run_id"] == "r-1"

    clock.set(datetime(2026, 11, 26, 5, 0, 1, tzinfo=timezone.utc) + NOTICE_GRACE)  # past the deadline, no run completed
    await until(lambda: len(receiver.calls) == 2, "the second webhook call", timeout=10)
    misses = await stub.ListSlaMisses(alerts_pb2.ListSlaMissesRequest(schedule_id="s-1", page_size=1))
    assert [(m.schedule_id, m.kind) for m in misses.misses] == [("s-1", "complete_by")]
    assert receiver.calls[1][2]["sluice"]["event"] == "sla_missed"
    listed = await stub.ListAlertPolicies(alerts_pb2.ListAlertPoliciesRequest())
    assert [p.schedule_id for p in listed.policies] == ["s-1"]
    await stub.DeleteAlertPolicy(alerts_pb2.DeleteAlertPolicyRequest(schedule_id="s-1"))
    with pytest.raises(grpc.aio.AioRpcError) as gone:
        await stub.GetAlertPolicy(alerts_pb2.GetAlertPolicyRequest(schedule_id="s-1"))
    assert gone.value.code() == grpc.StatusCode.NOT_FOUND
    assert len(receiver.calls) == 2
    await producer.close()


async def test_sluice_rebuild_alerts_writes_the_snapshot_the_service_recovers_from(tmp_path, receiver_factory):
    from sluice_services.cli.rebuild import rebuild

    receiver, url = await receiver_factory()
    clock = SimulatedClock(T0)
    log = SqliteEventLog(tmp_path / "events.db", clock=clock)
    before = AlertsService(log, clock)
    before.recover()
    before.set_policy(AlertPolicy("s-1", CompleteBy("06:00", "Europe/Berlin"), (url,)))
    clock.advance(timedelta(hours=3))
    assert before.fire_due() == 1
    rebuilt = rebuild("alerts", log)
    assert rebuilt.snapshots == ("alerts",) and rebuilt.entities == 1 and log.read_snapshot("alerts") is not None
    after = AlertsService(log, clock)
    after.recover()
    assert after.state == before.state and len(after.state.deliveries) == 1
    assert await after.deliver_due() == 1 and len(receiver.calls) == 1
    await before.close()
    await after.close()
    log.close()


async def test_sla_misses_are_listed_newest_first_in_pages(alerts_server, receiver_factory):
    stub, _, clock = alerts_server
    receiver, url = await receiver_factory()
    policy = alerts_pb2.AlertPolicy(schedule_id="s-9", webhooks=[url], on=[alerts_pb2.SLA_MISS], sla=alerts_pb2.Sla(
        complete_by=alerts_pb2.CompleteBy(time_of_day="06:00", zone="Europe/Berlin")))
    await stub.SetAlertPolicy(alerts_pb2.SetAlertPolicyRequest(policy=policy))
    clock.advance(timedelta(days=2, hours=3))  # three deadlines passed while nothing ran
    await until(lambda: len(receiver.calls) == 3, "the third webhook call", timeout=10)
    first = await stub.ListSlaMisses(alerts_pb2.ListSlaMissesRequest(page_size=2))
    second = await stub.ListSlaMisses(alerts_pb2.ListSlaMissesRequest(page_size=2, page_token=first.next_page_token))
    days = [m.deadline.ToDatetime().day for m in [*first.misses, *second.misses]]
    assert days == [28, 27, 26] and first.next_page_token and not second.next_page_token
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.ListSlaMisses(alerts_pb2.ListSlaMissesRequest(page_token="not-a-token"))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and refused.value.details().startswith("page_token")
    assert len(receiver.calls) == 3 and len({key for _, key, _ in receiver.calls}) == 3


async def test_after_a_restart_a_deadline_missed_meanwhile_waits_for_the_backlog_of_run_ends(tmp_path, receiver_factory):
    """Down across the deadline: the COMPLETED notification is still on the bus when the service is back."""
    receiver, url = await receiver_factory()
    clock = SimulatedClock(T0)
    log = SqliteEventLog(tmp_path / "events.db", clock=clock)
    before = AlertsService(log, clock)
    before.recover()
    before.set_policy(AlertPolicy("s-1", CompleteBy("06:00", "Europe/Berlin"), (url,)))
    await before.close()
    clock.advance(timedelta(hours=5))  # down from 04:00 to 09:00 Berlin; the run completed at 05:30
    after = AlertsService(log, clock)
    after.recover()
    assert after.fire_due() == 0  # not judged at once
    notification = Notification("n-done", T0 + timedelta(hours=1, minutes=30),
                                ProgramStatusChanged(PROGRAM, "r-1", RunStatus.COMPLETED, "s-1", "j-1"))
    record = Record(PROGRAM_NOTIFICATIONS, 0, 0, b"k", notification_to_proto(notification).SerializeToString(), (), 0)
    await after.apply([(record, AlertsService.parse_program_status(record))])
    clock.advance(NOTICE_GRACE)
    assert after.fire_due() == 0 and await after.deliver_due() == 0 and receiver.calls == []
    assert after.state.watches["s-1"].next_deadline == datetime(2026, 11, 27, 5, tzinfo=timezone.utc)
    await after.close()
    log.close()
