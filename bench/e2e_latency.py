"""e2e-latency: notification in -> LaunchRequested out, embedded and over Kafka.

The registry, matcher and checker (not the launcher, which would start Spark) run under
run_services in this process's event loop, with the gRPC server on 127.0.0.1 and an ephemeral
port, on one of:
- `file` (embedded mode): a SqliteEventLog file and the InProcessBus on a WAL file;
- `memory`: the same with an in-memory bus;
- `kafka` (distributed mode's transport): a real Kafka broker (deploy/kafka jars) and a real
  PostgreSQL server as the event log, both started for each rate and stopped after it.
`--bus all` (the default) measures `file` and `kafka`; Kafka figures are prefixed `kafka_`.

Setup per offered rate (a fresh stack in a fresh temp dir each time): S schedules (default 100)
are created through the registry's gRPC API (grpc.aio on the bound loopback port), one per
dataset with a partition trigger of count 1, and the benchmark waits until the matcher has
observed them all (ScheduleObserved in the log). So every notification triggers exactly one job.
The heap is then frozen out of garbage collection (sluice.runtime.heap), as a stack restarted with
those schedules freezes it after its recovery.

Measurement: a bus producer publishes N PartitionCommitted notifications (default 1000) to
the partition-notifications topic at the offered rate (open loop, paced against the schedule;
when behind it sends at once), stamping each send time just before the send. A separate
consumer group on `sluice.launch-requests` decodes each LaunchRequested and maps it back to
its triggering notification via job.context.notifications[].id; latency = receive - send.

Figures per rate R: latency_p50@R/s and latency_p99@R/s in ms (target p99 5 ms embedded,
50 ms over Kafka at 1000/s), and throughput@R/s: launch requests received per second from the
first send to the last receipt (target R: the stack keeps up with what is offered).
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import math
import random
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import grpc

from bench import Figure, option, progress
from sluice.bus.inprocess import InProcessBus
from sluice.bus.topics import LAUNCH_REQUESTS, PARTITION_NOTIFICATIONS, partition_event_key
from sluice.clock import SystemClock
from sluice.domain.common import Notification, PartitionCommitted, PartitionRef
from sluice.eventlog.port import EventLog
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.runtime.heap import freeze_long_lived
from sluice.runtime.service import run_services
from sluice.v1 import jobs_pb2, notifications_pb2, schedules_pb2, schedules_pb2_grpc
from sluice.wire.common import notification_to_proto
from sluice_services.composition import checker_spec, matcher_spec, registry_spec

DESCRIPTION = "embedded registry+matcher+checker: notification -> LaunchRequested latency p50/p99 and throughput"
DEFAULT_SCHEDULES = 100
DEFAULT_NOTIFICATIONS = 1_000
"""Per rate. 2,000 made a run take ~20 s here (the stack does not keep up with 1000/s, so that
phase lasts N / ~250 s), a minute for the default three runs."""
DEFAULT_RATES = (200.0, 1000.0)
TARGET_P99_MS = {"file": 5.0, "memory": 5.0, "kafka": 50.0}
MODES = {"all": ("file", "kafka"), "file": ("file",), "memory": ("memory",), "kafka": ("kafka",)}
NAMESPACE = "bench"
CONSUMER_GROUP = "bench-e2e-latency"
STARTUP_TIMEOUT = 30.0
DRAIN_TIMEOUT = 15.0
"""After the last send, how long to wait for the outstanding launch requests."""


def run(options: object) -> list[Figure]:
    schedules = option(options, "schedules", DEFAULT_SCHEDULES)
    notifications = option(options, "notifications", DEFAULT_NOTIFICATIONS)
    rates = getattr(options, "rates", None) or DEFAULT_RATES
    seed = getattr(options, "seed", 42)
    figures: list[Figure] = []
    for bus_kind in MODES[getattr(options, "bus", None) or "all"]:
        prefix = "kafka_" if bus_kind == "kafka" else ""
        for rate in rates:
            label = f"{rate:g}/s"
            with tempfile.TemporaryDirectory(prefix="sluice-bench-e2e-") as tmp, \
                    _infrastructure(bus_kind, Path(tmp)) as (log, bus):
                latencies, throughput = asyncio.run(
                    _measure(log, bus, rate, schedules, notifications, bus_kind, random.Random(seed)))
            figures += [
                Figure(f"{prefix}latency_p50@{label}", _percentile(latencies, 50), "ms", None),
                Figure(f"{prefix}latency_p99@{label}", _percentile(latencies, 99), "ms", TARGET_P99_MS[bus_kind]),
                Figure(f"{prefix}throughput@{label}", throughput, "launch-requests/s", rate),
            ]
    return figures


@contextlib.contextmanager
def _infrastructure(bus_kind: str, tmp: Path):
    """(event log, bus) for one measurement; Kafka mode starts a broker and a PostgreSQL server."""
    if bus_kind != "kafka":
        yield SqliteEventLog(tmp / "events.db"), InProcessBus(tmp / "bus.db" if bus_kind == "file" else None)
        return
    from sluice.bus.kafka import KafkaBus
    from sluice.eventlog.postgres import PostgresEventLog
    from sluice.testing.kafka import KafkaBroker
    from sluice.testing.postgres import PostgresServer

    with KafkaBroker() as kafka, PostgresServer() as postgres:
        progress(f"[e2e-latency] Kafka broker on {kafka.bootstrap}, PostgreSQL on port {postgres.port}")
        yield PostgresEventLog(postgres.create_database()), KafkaBus(kafka.bootstrap)


async def _measure(log: EventLog, bus, rate: float, schedules: int, count: int, bus_kind: str,
                   rng: random.Random) -> tuple[list[float], float]:
    clock = SystemClock()
    producer = bus.producer()
    stop = asyncio.Event()
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    specs = [registry_spec(log, clock, producer), matcher_spec(log, clock, producer), checker_spec(log, clock)]
    stack = asyncio.create_task(run_services(
        specs, bus, log, host="127.0.0.1", port=0, stop=stop,
        on_ready=lambda port: ready.done() or ready.set_result(port)))
    receiver: asyncio.Task | None = None
    try:
        await asyncio.wait([ready, stack], timeout=STARTUP_TIMEOUT, return_when=asyncio.FIRST_COMPLETED)
        if stack.done():
            stack.result()  # raises what stopped it
            raise RuntimeError("the services stopped during start-up")
        if not ready.done():
            raise TimeoutError(f"the services did not start within {STARTUP_TIMEOUT:.0f} s")
        port = ready.result()

        started = time.perf_counter()
        await _create_schedules(port, schedules)
        await _wait_observed(log, schedules, stack)
        freeze_long_lived()  # what a stack restarted with these schedules does after its recovery
        progress(f"[e2e-latency] {schedules} schedules created over gRPC and observed by the matcher"
                 f" in {time.perf_counter() - started:.2f} s ({bus_kind} bus)")

        received: dict[str, float] = {}
        received_wall: dict[str, float] = {}
        consumer = bus.consumer(CONSUMER_GROUP, [LAUNCH_REQUESTS])
        receiver = asyncio.create_task(_receive(consumer, received, received_wall))
        batch = _notifications(count, schedules, rng)
        sent: dict[str, float] = {}
        sent_wall: dict[str, float] = {}
        due: dict[str, float] = {}
        cpu = time.process_time()
        head = log.head_position()
        behind = await _send(bus.producer(), batch, rate, sent, sent_wall, due)
        last_send = time.perf_counter()
        deadline = last_send + DRAIN_TIMEOUT
        while len(received) < count and time.perf_counter() < deadline and not stack.done():
            await asyncio.sleep(0.01)
        cpu = time.process_time() - cpu
        if stack.done():
            stack.result()
            raise RuntimeError("the services stopped during the measurement")
        _report_stages(log, head, sent_wall, received_wall)
    finally:
        if receiver is not None:
            receiver.cancel()
            await asyncio.gather(receiver, return_exceptions=True)
        stop.set()
        try:
            await asyncio.wait_for(stack, 10.0)
        except (asyncio.CancelledError, TimeoutError):
            pass
        except Exception as error:  # already reported above when it ended the measurement
            progress(f"[e2e-latency] the services ended with {error!r}")
        await bus.close()
        log.close()

    latencies = [(received[nid] - sent[nid]) * 1000 for nid in sent if nid in received]
    missing = count - len(latencies)
    if not latencies:
        raise RuntimeError(f"no LaunchRequested arrived within {DRAIN_TIMEOUT:.0f} s of the last send")
    first_send = min(sent.values())
    last_receipt = max(received[nid] for nid in sent if nid in received)
    throughput = len(latencies) / (last_receipt - first_send)
    sending = last_send - first_send
    progress(f"[e2e-latency] offered {rate:g}/s: sent {count} in {sending:.2f} s ({count / sending:.0f}/s,"
             f" producer at most {behind * 1000:.1f} ms behind schedule), received {len(latencies)},"
             f" max latency {max(latencies):.1f} ms; process CPU {cpu:.2f} s"
             f" over {last_receipt - first_send:.2f} s from first send to last receipt")
    if behind > 0.05:  # the stack did not keep up, so the producer (on the same loop) was held back
        intended = [(received[nid] - due[nid]) * 1000 for nid in due if nid in received]
        progress(f"[e2e-latency] from the intended send times instead (what a producer that is not held back"
                 f" would see): p50 {_percentile(intended, 50):.1f} ms, p99 {_percentile(intended, 99):.1f} ms")
    if missing:
        progress(f"[e2e-latency] WARNING: {missing} of {count} notifications produced no LaunchRequested"
                 f" within {DRAIN_TIMEOUT:.0f} s; their latency is not in the percentiles")
    return latencies, throughput


async def _create_schedules(port: int, schedules: int) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = schedules_pb2_grpc.ScheduleRegistryStub(channel)
        for index in range(schedules):
            await stub.CreateSchedule(schedules_pb2.CreateScheduleRequest(schedule=schedules_pb2.Schedule(
                name=f"on-ds-{index:05d}", enabled=True, properties={"experiment": f"exp-{index}"},
                program=notifications_pb2.ProgramRef(namespace=NAMESPACE, app="bench", program="noop"),
                trigger=schedules_pb2.Trigger(partition=schedules_pb2.PartitionTrigger(
                    namespace=NAMESPACE, dataset=_dataset(index), count=1)))), timeout=10.0)


async def _wait_observed(log: EventLog, schedules: int, stack: asyncio.Task) -> None:
    """Until the matcher has recorded every schedule (it consumes them from the schedules topic)."""
    observed, after = 0, 0
    deadline = time.perf_counter() + STARTUP_TIMEOUT
    while observed < schedules:
        if stack.done():
            stack.result()
            raise RuntimeError("the services stopped while the matcher caught up with the schedules")
        if time.perf_counter() > deadline:
            raise TimeoutError(f"the matcher observed {observed} of {schedules} schedules in {STARTUP_TIMEOUT:.0f} s")
        for event in log.read_all(after, 1000):
            after = event.position
            observed += event.type == "ScheduleObserved" and event.stream.startswith("matcher-")
        await asyncio.sleep(0.01)


def _notifications(count: int, schedules: int, rng: random.Random) -> list[tuple[str, bytes, bytes]]:
    """(id, key, value) of each notification, serialised before the clock starts."""
    t0 = datetime.now(timezone.utc)
    batch = []
    for index in range(count):
        dataset = _dataset(rng.randrange(schedules))
        notification = Notification(
            f"bench-n-{index:08d}", t0 + timedelta(milliseconds=index),
            PartitionCommitted(NAMESPACE, dataset, (PartitionRef({"seq": str(index)}, f"/data/{dataset}/{index}", 1024, 10),)))
        batch.append((notification.id, partition_event_key(NAMESPACE, dataset).encode(),
                      notification_to_proto(notification).SerializeToString()))
    return batch


async def _send(producer, batch: list[tuple[str, bytes, bytes]], rate: float, sent: dict[str, float],
                sent_wall: dict[str, float], due: dict[str, float]) -> float:
    """Open loop at `rate`: each send starts on schedule without waiting for the previous one's
    acknowledgement (as many producers publishing at once would); how far behind schedule the
    producer fell at worst (s)."""
    start = time.perf_counter()
    behind = 0.0
    sending: list[asyncio.Task] = []
    for index, (nid, key, value) in enumerate(batch):
        due[nid] = start + index / rate
        delay = due[nid] - time.perf_counter()
        # Always yield: the services run on this loop, a late producer must not starve them.
        await asyncio.sleep(max(delay, 0.0))
        now = time.perf_counter()
        behind = max(behind, now - due[nid])
        sent[nid] = now
        sent_wall[nid] = time.time()
        sending.append(asyncio.ensure_future(producer.send(PARTITION_NOTIFICATIONS, value, key=key)))
    await asyncio.gather(*sending)
    await producer.close()
    return behind


async def _receive(consumer, received: dict[str, float], received_wall: dict[str, float]) -> None:
    try:
        while True:
            records = await consumer.poll(timeout=0.2)
            now, wall = time.perf_counter(), time.time()
            for record in records:
                message = jobs_pb2.LaunchRequested()
                message.ParseFromString(record.value)
                for notification in message.job.context.notifications:
                    received.setdefault(notification.id, now)
                    received_wall.setdefault(notification.id, wall)
            if records:
                await consumer.commit()
    finally:
        await consumer.close()


def _report_stages(log: EventLog, after: int, sent: dict[str, float], received: dict[str, float]) -> None:
    """Diagnostics: where the latency goes, from the recorded_at (wall clock) of the matcher's
    JobTriggered and the checker's JobAdmitted of each notification's job."""
    triggered: dict[str, float] = {}
    admitted: dict[str, float] = {}
    while events := log.read_all(after, 5000):
        after = events[-1].position
        for event in events:
            target = {"JobTriggered": triggered, "JobAdmitted": admitted}.get(event.type)
            if target is not None:
                for notification in json.loads(event.data)["job"]["context"]["notifications"]:
                    target.setdefault(notification["id"], event.recorded_at.timestamp())
    stages = [
        ("sent -> matcher's JobTriggered committed", sent, triggered),
        ("JobTriggered -> checker's JobAdmitted committed", triggered, admitted),
        ("JobAdmitted -> LaunchRequested received", admitted, received),
    ]
    parts = []
    for name, start, end in stages:
        spans = [(end[nid] - start[nid]) * 1000 for nid in start if nid in end]
        if spans:
            parts.append(f"{name}: p50 {_percentile(spans, 50):.1f} / p99 {_percentile(spans, 99):.1f} ms")
    progress("[e2e-latency] stages: " + "; ".join(parts))


def _dataset(index: int) -> str:
    return f"ds-{index:05d}"


def _percentile(values: list[float], percent: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(percent / 100 * len(ordered)) - 1)]
