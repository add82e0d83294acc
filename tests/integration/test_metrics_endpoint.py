"""`sluice standalone --metrics-port 0` serves Prometheus metrics: gRPC requests by method and code,
consumer and outbox series, and a health endpoint."""
from __future__ import annotations

import asyncio
import re
import time
import urllib.request

import grpc
import pytest
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from sluice.bus.inprocess import InProcessBus
from sluice.bus.topics import PARTITION_NOTIFICATIONS
from sluice.client import SluiceClient
from sluice.clock import SimulatedClock
from sluice.domain.common import PartitionRef
from sluice.eventlog.sqlite import SqliteEventLog
from sluice_services.localserver import LocalServer
from sluice.runtime.consumer import Subscription
from sluice.runtime.errors import MalformedMessage
from sluice.runtime.metrics import Registry
from sluice.runtime.service import ServiceSpec, run_services
from sluice.v1 import notifications_pb2

pytestmark = pytest.mark.integration

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$')
REGISTRY = 'grpc_service="sluice.v1.ScheduleRegistry"'
NOTIFICATIONS = 'grpc_service="sluice.v1.Notifications"'
PARTITIONS = 'topic="sluice.notifications.partition",group="trigger-matcher-lookup"'


def get(address: str, path: str) -> tuple[int, str, str]:
    with urllib.request.urlopen(f"http://{address}{path}", timeout=10) as response:
        return response.status, response.headers["Content-Type"], response.read().decode()


def samples(text: str) -> dict[str, float]:
    """'name{labels}' -> value; every line is a comment or a well-formed sample."""
    found = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert re.match(r"^# (HELP|TYPE) \S+ .+$", line), line
            continue
        match = SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        found[f"{match[1]}{match[2] or ''}"] = float(match[3])
    return found


def scrape_until(address: str, series: str, value: float, timeout: float = 20.0) -> dict[str, float]:
    deadline = time.monotonic() + timeout
    while True:
        found = samples(get(address, "/metrics")[2])
        if found.get(series) == value or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def test_metrics_endpoint_counts_grpc_requests_and_exposes_consumer_and_outbox_series(tmp_path):
    with LocalServer(tmp_path / "sluice", args=["--metrics-port", "0"]) as server, SluiceClient(server.address) as client:
        assert server.metrics_address.startswith("127.0.0.1:")
        assert get(server.metrics_address, "/healthz")[::2] == (200, "ok")

        with pytest.raises(grpc.RpcError) as refused:
            client.publish(notifications_pb2.Notification(id="n-bad"))  # no time, no payload
        assert refused.value.code().name == "INVALID_ARGUMENT"
        assert client.list_schedules() == []
        client.publish_partitions("experiments", "clickstream", [PartitionRef({"hour": "09"}, "/data/09")])

        consumed = f"sluice_consumer_messages_total{{{PARTITIONS}}}"
        found = scrape_until(server.metrics_address, consumed, 1)
        status, content_type, _ = get(server.metrics_address, "/metrics")
        assert status == 200 and content_type.startswith("text/plain; version=0.0.4")

    handled = "sluice_grpc_server_handled_total"
    assert found[f'{handled}{{{NOTIFICATIONS},grpc_method="Publish",grpc_code="INVALID_ARGUMENT"}}'] == 1
    assert found[f'{handled}{{{NOTIFICATIONS},grpc_method="Publish",grpc_code="OK"}}'] == 1
    assert found[f'{handled}{{{REGISTRY},grpc_method="ListSchedules",grpc_code="OK"}}'] == 1
    assert not any(key.startswith(handled) and 'grpc_method="ListSchedules"' in key and "OK" not in key for key in found)
    seconds = "sluice_grpc_server_handling_seconds"
    assert found[f'{seconds}_count{{{NOTIFICATIONS},grpc_method="Publish"}}'] == 2
    assert found[f'{seconds}_bucket{{{REGISTRY},grpc_method="ListSchedules",le="+Inf"}}'] == 1

    assert found[consumed] == 1
    assert found[f"sluice_consumer_handling_seconds_count{{{PARTITIONS}}}"] == 1
    assert found[f'sluice_consumer_dead_lettered_total{{{PARTITIONS},reason="malformed"}}'] == 0
    assert found['sluice_consumer_dead_lettered_total{topic="sluice.jobs",group="constraint-checker",reason="handler_failed"}'] == 0
    for relay in ("registry", "matcher", "checker", "launcher"):
        assert f'sluice_outbox_position{{relay="{relay}"}}' in found


async def test_run_services_reports_dead_letters_by_reason_and_streaming_calls(tmp_path):
    """In one process: a subscription whose handler refuses one message and fails on another, and
    the streaming reflection call, all reported to the registry passed to run_services."""
    async def handler(record) -> None:
        if record.value == b"malformed":
            raise MalformedMessage("not a notification")
        if record.value == b"boom":
            raise RuntimeError("outage")

    registry, clock, stop = Registry(), SimulatedClock(), asyncio.Event()
    log, bus = SqliteEventLog(tmp_path / "events.db", clock=clock), InProcessBus()
    spec = ServiceSpec("probe", [Subscription("probe", {PARTITION_NOTIFICATIONS: handler})])
    ready = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(run_services([spec], bus, log, on_ready=ready.set_result, stop=stop, metrics=registry))
    port = await asyncio.wait_for(ready, 10)
    producer = bus.producer()
    for value in (b"fine", b"malformed", b"boom"):
        await producer.send(PARTITION_NOTIFICATIONS, value, key=b"k")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        assert [r async for r in stub.ServerReflectionInfo(iter([request]))]

    probe = f'topic="{PARTITION_NOTIFICATIONS}",group="probe"'
    deadline = time.monotonic() + 20
    while samples(registry.render()).get(f"sluice_consumer_messages_total{{{probe}}}") != 3:
        assert time.monotonic() < deadline, registry.render()
        await asyncio.sleep(0.05)
    found = samples(registry.render())
    stop.set()
    await task
    await producer.close()
    log.close()

    assert found[f'sluice_consumer_dead_lettered_total{{{probe},reason="malformed"}}'] == 1
    assert found[f'sluice_consumer_dead_lettered_total{{{probe},reason="handler_failed"}}'] == 1
    assert found[f"sluice_consumer_handling_seconds_count{{{probe}}}"] == 3
    reflection = 'grpc_service="grpc.reflection.v1alpha.ServerReflection",grpc_method="ServerReflectionInfo"'
    assert found[f'sluice_grpc_server_handled_total{{{reflection},grpc_code="OK"}}'] == 1
