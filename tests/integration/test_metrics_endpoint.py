"""`sluice standalone --metrics-port 0` serves Prometheus metrics (prometheus_client, parsed here
with its own parser): gRPC requests by method and code, each service's consumer and outbox series
labelled by service, process metrics, and the scheduler's families, each seen to change while a
workload runs on a real standalone (programs run by the fake spark-submit)."""
from __future__ import annotations

import asyncio
import os
import sys
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from sluice.bus.inprocess import InProcessBus
from sluice.bus.topics import PARTITION_NOTIFICATIONS
from sluice.client import SluiceClient
from sluice.clock import SimulatedClock, SystemClock
from sluice.domain.common import PartitionRef
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.runtime.consumer import Subscription
from sluice.runtime.errors import MalformedMessage
from sluice.runtime.metrics import Registry
from sluice.runtime.service import ServiceSpec, run_services
from sluice.v1 import notifications_pb2, schedules_pb2, schedules_pb2_grpc
from sluice_services.localserver import LocalServer
from tests.support.console import FAKE_SPARK_SUBMIT, PROGRAM, REPO, load_demo_data, schedule

pytestmark = pytest.mark.integration

Samples = dict[tuple[str, frozenset], float]
REGISTRY = {"grpc_service": "sluice.v1.ScheduleRegistry"}
NOTIFICATIONS = {"grpc_service": "sluice.v1.Notifications"}
PARTITIONS = {"topic": "sluice.notifications.partition", "group": "trigger-matcher-lookup", "service": "matcher"}


def get(address: str, path: str) -> tuple[int, str, str]:
    with urllib.request.urlopen(f"http://{address}{path}", timeout=10) as response:
        return response.status, response.headers["Content-Type"], response.read().decode()


def samples(text: str) -> Samples:
    """(sample name, labels) -> value, parsed by prometheus_client (a malformed exposition raises)."""
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(found: Samples, name: str, **labels: str) -> float | None:
    return found.get((name, frozenset(labels.items())))


def total(found: Samples, name: str, **labels: str) -> float:
    """The sum over every series of `name` whose labels include `labels`."""
    return sum(v for (n, items), v in found.items() if n == name and set(labels.items()) <= items)


def scrape(address: str) -> Samples:
    return samples(get(address, "/metrics")[2])


def scrape_until(address: str, done, timeout: float = 60.0) -> Samples:
    deadline = time.monotonic() + timeout
    while True:
        found = scrape(address)
        if done(found) or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def test_metrics_endpoint_counts_grpc_requests_and_exposes_consumer_and_outbox_series(tmp_path):
    with LocalServer(tmp_path / "sluice", args=["--metrics-port", "0"]) as server, SluiceClient(server.address) as client:
        assert server.metrics_address.startswith("127.0.0.1:")
        assert get(server.metrics_address, "/healthz")[::2] == (200, "ok")

        with pytest.raises(grpc.RpcError) as refused:
            client.publish(notifications_pb2.Notification(id="n-bad"))  # no time, no payload
        assert refused.value.code().name == "INVALID_ARGUMENT"
        assert client.list_schedules() == []
        client.publish_partitions("experiments", "clickstream", [PartitionRef({"hour": "09"}, "/data/09")])

        found = scrape_until(server.metrics_address,
                             lambda f: value(f, "sluice_consumer_messages_total", **PARTITIONS) == 1, 20)
        status, content_type, _ = get(server.metrics_address, "/metrics")
        assert status == 200 and content_type.startswith("text/plain; version=")

    handled = "sluice_grpc_server_handled_total"
    assert value(found, handled, **NOTIFICATIONS, grpc_method="Publish", grpc_code="INVALID_ARGUMENT") == 1
    assert value(found, handled, **NOTIFICATIONS, grpc_method="Publish", grpc_code="OK") == 1
    assert value(found, handled, **REGISTRY, grpc_method="ListSchedules", grpc_code="OK") == 1
    assert not any(n == handled and ("grpc_method", "ListSchedules") in items and ("grpc_code", "OK") not in items
                   for n, items in found)
    seconds = "sluice_grpc_server_handling_seconds"
    assert value(found, f"{seconds}_count", **NOTIFICATIONS, grpc_method="Publish") == 2
    assert value(found, f"{seconds}_bucket", **REGISTRY, grpc_method="ListSchedules", le="+Inf") == 1

    assert value(found, "sluice_consumer_messages_total", **PARTITIONS) == 1
    assert value(found, "sluice_consumer_handling_seconds_count", **PARTITIONS) == 1
    assert value(found, "sluice_consumer_dead_lettered_total", **PARTITIONS, reason="malformed") == 0
    assert value(found, "sluice_consumer_dead_lettered_total", topic="sluice.jobs", group="constraint-checker",
                 reason="handler_failed", service="checker") == 0
    for relay in ("registry", "matcher", "checker", "launcher"):
        assert value(found, "sluice_outbox_position", relay=relay, service=relay) is not None
    assert total(found, "process_cpu_seconds_total") > 0 and total(found, "process_resident_memory_bytes") > 0


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
    for item in (b"fine", b"malformed", b"boom"):
        await producer.send(PARTITION_NOTIFICATIONS, item, key=b"k")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        assert [r async for r in stub.ServerReflectionInfo(iter([request]))]

    probe = {"topic": PARTITION_NOTIFICATIONS, "group": "probe", "service": "probe"}
    deadline = time.monotonic() + 20
    while value(samples(registry.render()), "sluice_consumer_messages_total", **probe) != 3:
        assert time.monotonic() < deadline, registry.render()
        await asyncio.sleep(0.05)
    found = samples(registry.render())
    stop.set()
    await task
    await producer.close()
    log.close()

    assert value(found, "sluice_consumer_dead_lettered_total", **probe, reason="malformed") == 1
    assert value(found, "sluice_consumer_dead_lettered_total", **probe, reason="handler_failed") == 1
    assert value(found, "sluice_consumer_handling_seconds_count", **probe) == 3
    reflection = {"grpc_service": "grpc.reflection.v1alpha.ServerReflection", "grpc_method": "ServerReflectionInfo"}
    assert value(found, "sluice_grpc_server_handled_total", **reflection, grpc_code="OK") == 1


FAILING = "raise SystemExit('the metrics test program fails on purpose')\n"


def workload_server(root: Path) -> LocalServer:
    apps = root / "apps" / "analytics"
    apps.mkdir(parents=True)
    (apps / "count.py").write_text(PROGRAM)
    (apps / "fail.py").write_text(FAILING)
    env = {key: v for key, v in os.environ.items() if not key.startswith("SLUICE_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")]))
    return LocalServer(root / "data", env=env, args=[
        "--metrics-port", "0", "--spark-submit", str(FAKE_SPARK_SUBMIT), "--spark-master", "local[1]",
        "--apps-dir", str(root / "apps"), "--max-parallel-runs", "4"])


def add_workload_schedules(address: str) -> None:
    """A job held 2 s by a delay constraint (the checker's timer fires it), and a failing program
    retried once after 1 s (the launcher's timer starts the retry)."""
    clicks = {"partition": {"namespace": "web", "dataset": "clicks", "count": 1}}
    soon = schedule("soon_counts", clicks, constraints=[{"delay": {"seconds": 2}}])
    failing = schedule("failing", clicks)
    failing.program.program = "fail"
    failing.retry_policy.max_retries, failing.retry_policy.retry_failed = 1, True
    failing.retry_policy.delay.seconds = 1
    with grpc.insecure_channel(address) as channel:
        registry = schedules_pb2_grpc.ScheduleRegistryStub(channel)
        for item in (soon, failing):
            registry.CreateSchedule(schedules_pb2.CreateScheduleRequest(schedule=item), timeout=10)


async def send_malformed_notification(data_dir: Path) -> None:
    """Through the standalone's own durable bus (another process may append to it): one record the
    matcher cannot read."""
    bus = InProcessBus(data_dir / "bus.db", clock=SystemClock())
    producer = bus.producer()
    await producer.send(PARTITION_NOTIFICATIONS, b"\xffnot a notification", key=b"k")
    await producer.close()
    await bus.close()


WORKLOAD_CHANGES = {
    "jobs launched": lambda f: value(f, "sluice_jobs", service="checker", state="LAUNCHED"),
    "checker queue depth": lambda f: value(f, "sluice_checker_queue_depth", service="checker"),
    "checker timer lag": lambda f: value(f, "sluice_timer_lag_seconds_count", service="checker"),
    "launcher timer lag": lambda f: value(f, "sluice_timer_lag_seconds_count", service="launcher"),
    "notification to launch": lambda f: value(f, "sluice_notification_to_launch_seconds_count", service="launcher"),
    "first launches": lambda f: value(f, "sluice_launches_total", service="launcher", attempt="first"),
    "retries launched": lambda f: value(f, "sluice_launches_total", service="launcher", attempt="retry"),
    "runs completed": lambda f: value(f, "sluice_runs", service="launcher", status="COMPLETED"),
    "runs failed": lambda f: value(f, "sluice_runs", service="launcher", status="FAILED"),
    "completed durations": lambda f: value(f, "sluice_run_duration_seconds_count", service="launcher",
                                           status="COMPLETED"),
    "failed durations": lambda f: value(f, "sluice_run_duration_seconds_count", service="launcher", status="FAILED"),
    "dead letters, malformed": lambda f: value(f, "sluice_consumer_dead_lettered_total", **PARTITIONS,
                                               reason="malformed"),
    "launcher outbox lag": lambda f: value(f, "sluice_outbox_lag_seconds", service="launcher", relay="launcher"),
    "event log appends": lambda f: total(f, "sluice_eventlog_append_seconds_count", outcome="ok"),
    "process CPU": lambda f: total(f, "process_cpu_seconds_total"),
}
"""What the workload must move (each from its value before it), by what it means."""


def test_each_scheduler_family_changes_while_a_workload_runs(tmp_path):
    with workload_server(tmp_path) as server:
        before = scrape(server.metrics_address)
        assert {name: read(before) for name, read in WORKLOAD_CHANGES.items() if read(before) is None} == {}
        add_workload_schedules(server.address)
        with grpc.insecure_channel(server.address) as channel:
            load_demo_data(channel, "", server.data_dir)   # two clicks partitions: every schedule fires twice
        asyncio.run(send_malformed_notification(server.data_dir))

        def moved(found: Samples) -> list[str]:
            return [name for name, read in WORKLOAD_CHANGES.items() if not (read(found) or 0) > (read(before) or 0)]

        after = scrape_until(server.metrics_address, lambda f: not moved(f), timeout=90)
        assert moved(after) == [], {name: (read(before), read(after)) for name, read in WORKLOAD_CHANGES.items()}

    lag = [v for (name, _), v in after.items() if name == "sluice_consumer_lag_records"]
    assert lag and min(lag) >= 0                                           # every assigned partition, read live
    topics = {dict(items)["topic"] for (name, items) in after if name == "sluice_consumer_lag_records"}
    assert {"sluice.jobs", "sluice.launch-requests", "sluice.notifications.partition"} <= topics
    assert value(after, "sluice_jobs", service="checker", state="PENDING_CONSTRAINT") >= 1   # the day-long delay
    assert value(after, "sluice_runs_ended_total", service="launcher", status="FAILED") >= 1
