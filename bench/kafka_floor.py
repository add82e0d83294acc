"""kafka-floor: e2e-latency's distributed path with nothing in its services, on the real broker and PostgreSQL.

e2e-latency over Kafka measures notification -> LaunchRequested through the registry, matcher and
checker processes. This measures the same hops with trivial services, to tell what the hops cost
on this machine from what the scheduling adds: three processes, each a consumer of its own group
and a producer of Sluice's KafkaBus, relay every record of a poll to the next of Sluice's topics:
`lookup` (notifications -> matches), `matcher` (-> jobs) and `checker` (-> launch requests), the
last two first inserting the poll's records into a PostgreSQL table in one transaction, as a
service appends its events. Nothing else: no parsing, no decisions, no outbox reading the events
back.

The load is e2e-latency's (`send_at_rate`): after a warm-up at the rate (WARM_UP_SECONDS,
`--warm-up`), N records (default MEASURE_SECONDS of sending, at least 1000) are published at the
rate, keyed over 1,000 keys; latency = receipt by a consumer of the launch requests - send.

Figures per rate R: latency_p50@R/s, latency_p99@R/s (the target is e2e-latency's: 50 ms at
1000/s). The relays' CPU per record of the measured load goes to stderr, beside e2e-latency's CPU per
notification (on the loaded machine the CPU figures are steadier than the p99s). Processes are stopped by
pid however the run ends.
"""
from __future__ import annotations

import asyncio
import math
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from bench import Figure, option, percentile, progress
from bench.e2e_latency import process_cpu_seconds, send_at_rate
from sluice.bus.kafka import KafkaBus
from sluice.bus.port import Message
from sluice.bus.topics import ALL_TOPICS, JOBS, LAUNCH_REQUESTS, MATCHES, PARTITION_NOTIFICATIONS
from tests.support.kafka import SERVING_HEAP_OPTS, KafkaBroker
from tests.support.postgres import PostgresServer

DESCRIPTION = "e2e-latency's Kafka hops with trivial services (relay, PostgreSQL insert): p50/p99, the floor here"
PATH = (PARTITION_NOTIFICATIONS, MATCHES, JOBS, LAUNCH_REQUESTS)
HOPS = (("lookup", False), ("matcher", True), ("checker", True))
"""(service, inserts into PostgreSQL), relaying PATH[i] to PATH[i + 1]."""
DEFAULT_RATES = (200.0, 1000.0)
MEASURE_SECONDS = 5.0
WARM_UP_SECONDS = 10.0
DRAIN_TIMEOUT = 30.0
ROOT = Path(__file__).resolve().parent.parent


def run(options: object) -> list[Figure]:
    rates = getattr(options, "rates", None) or DEFAULT_RATES
    warm_up = getattr(options, "warm_up", None)
    warm_up = WARM_UP_SECONDS if warm_up is None else warm_up
    figures = []
    for rate in rates:
        count = option(options, "notifications", max(1000, math.ceil(rate * MEASURE_SECONDS)))
        latencies = asyncio.run(measure(rate, count, math.ceil(rate * warm_up)))
        progress(f"[kafka-floor] {rate:g}/s: {len(latencies)} of {count} received, max {max(latencies):.1f} ms")
        figures += [Figure(f"latency_p50@{rate:g}/s", percentile(latencies, 50), "ms", None),
                    Figure(f"latency_p99@{rate:g}/s", percentile(latencies, 99), "ms", 50.0)]
    return figures


async def measure(rate: float, count: int, warm_up: int) -> list[float]:
    with KafkaBroker(heap_opts=SERVING_HEAP_OPTS) as kafka, PostgresServer() as postgres:
        dsn = postgres.create_database("floor")
        bus = KafkaBus(kafka.bootstrap)
        relays = []
        try:
            await bus.create_topics(ALL_TOPICS)
            for (name, inserts), source, target in zip(HOPS, PATH, PATH[1:]):
                relays.append(subprocess.Popen(
                    [sys.executable, "-m", "bench.kafka_floor", "relay", kafka.bootstrap, source, target,
                     dsn if inserts else ""], cwd=ROOT, stdout=subprocess.PIPE))
                if relays[-1].stdout.readline().strip() != b"ready":
                    raise RuntimeError(f"the {name} relay did not start")
            received: dict[str, float] = {}
            receiving = asyncio.create_task(_receive(bus, received))
            try:
                if warm_up:
                    await _load(bus, rate, "warm", warm_up, received)
                cpu_before = [process_cpu_seconds(relay.pid) for relay in relays]
                latencies = await _load(bus, rate, "measured", count, received)
                cpu = [process_cpu_seconds(relay.pid) - before for relay, before in zip(relays, cpu_before)]
                progress(f"[kafka-floor] CPU {sum(cpu):.2f} s, {sum(cpu) / count * 1000:.3f} ms per record: "
                         + ", ".join(f"{name} {seconds:.2f} s" for (name, _), seconds in zip(HOPS, cpu)))
                return latencies
            finally:
                receiving.cancel()
                await asyncio.gather(receiving, return_exceptions=True)
        finally:
            for relay in relays:
                relay.kill()
                relay.wait()
            await bus.close()


async def _load(bus: KafkaBus, rate: float, prefix: str, count: int, received: dict[str, float]) -> list[float]:
    """`count` records at `rate`, then every one awaited at the end of the path; the sorted latencies (ms)."""
    batch = [(f"{prefix}-{index}", str(index % 1000).encode(), f"{prefix}-{index}".encode()) for index in range(count)]
    sent: dict[str, float] = {}
    await send_at_rate(bus.producer(), batch, rate, sent, {})
    deadline = time.perf_counter() + DRAIN_TIMEOUT
    while any(nid not in received for nid in sent) and time.perf_counter() < deadline:
        await asyncio.sleep(0.05)
    latencies = sorted((received[nid] - at) * 1000 for nid, at in sent.items() if nid in received)
    if not latencies:
        raise RuntimeError(f"nothing came through within {DRAIN_TIMEOUT:.0f} s")
    return latencies


async def _receive(bus: KafkaBus, received: dict[str, float]) -> None:
    consumer = bus.consumer("floor-receiver", [LAUNCH_REQUESTS])
    try:
        while True:
            records = await consumer.poll(timeout=0.2)
            now = time.perf_counter()
            for record in records:
                received.setdefault(record.value.decode(), now)
    finally:
        await consumer.close()


async def relay(bootstrap: str, source: str, target: str, dsn: str) -> None:
    """One trivial service: every poll of `source` inserted into PostgreSQL (when `dsn`) in one
    transaction, then published to `target` and acknowledged."""
    connection = await psycopg.AsyncConnection.connect(dsn, autocommit=True) if dsn else None
    table = "events_" + source.replace(".", "_").replace("-", "_")
    if connection is not None:
        await connection.execute(f"CREATE TABLE IF NOT EXISTS {table} (position bigserial PRIMARY KEY,"
                                 " id text UNIQUE NOT NULL, data bytea NOT NULL)")
    bus = KafkaBus(bootstrap)
    consumer, producer = bus.consumer(f"floor-{source}", [source]), bus.producer()
    await consumer.poll(timeout=0.1)  # joined its group
    print("ready", flush=True)
    while True:
        records = await consumer.poll(timeout=1.0)
        if not records:
            continue
        if connection is not None:
            async with connection.transaction(), connection.cursor() as cursor:
                await cursor.executemany(f"INSERT INTO {table} (id, data) VALUES (%s, %s)",
                                         [(f"{r.topic}:{r.partition}:{r.offset}", r.value) for r in records])
        await producer.send_batch([Message(target, r.value, r.key) for r in records])


if __name__ == "__main__" and sys.argv[1:2] == ["relay"]:
    asyncio.run(relay(*sys.argv[2:6]))
