"""kafka-floor: e2e-latency's distributed path with nothing in its services, on the real broker and PostgreSQL.

e2e-latency over Kafka measures notification -> LaunchRequested through the registry, matcher and
checker processes. This measures the same hops with trivial services, to tell what the hops cost
on this machine from what the scheduling adds: three processes, each a consumer (its own group)
and an idempotent acks=all producer (aiokafka, as KafkaBus), relay every record of a poll to the
next topic: `lookup` (notifications -> matches), `matcher` (-> jobs) and `checker` (-> launch
requests), the last two first inserting the poll's records into a PostgreSQL table in one
transaction, as a service appends its events. Nothing else: no parsing, no decisions, no outbox
reading the events back. Topics of DEFAULT_PARTITIONS partitions, as Sluice's.

The load is e2e-latency's: after a warm-up at the rate (WARM_UP_SECONDS, `--warm-up`), an open
loop publishes N records (default MEASURE_SECONDS of sending, at least 1000) at the rate, keyed
over 1,000 keys; latency = receipt by a consumer of the last topic - send.

Figures per rate R: latency_p50@R/s, latency_p99@R/s (the target is e2e-latency's: 50 ms at
1000/s). Processes are stopped by pid however the run ends.
"""
from __future__ import annotations

import asyncio
import math
import subprocess
import sys
import time
from pathlib import Path

import psycopg
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from bench import Figure, option, percentile, progress
from sluice.bus.topics import DEFAULT_PARTITIONS
from sluice.testing.kafka import KafkaBroker
from sluice.testing.postgres import PostgresServer

DESCRIPTION = "e2e-latency's Kafka hops with trivial services (relay, PostgreSQL insert): p50/p99, the floor here"
TOPICS = ("floor.notifications", "floor.matches", "floor.jobs", "floor.launch-requests")
HOPS = (("lookup", False), ("matcher", True), ("checker", True))
"""(service, inserts into PostgreSQL), relaying TOPICS[i] to TOPICS[i + 1]."""
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
        latencies = asyncio.run(_measure(rate, count, math.ceil(rate * warm_up)))
        progress(f"[kafka-floor] {rate:g}/s: {len(latencies)} of {count} received, max {latencies[-1]:.1f} ms")
        figures += [Figure(f"latency_p50@{rate:g}/s", percentile(latencies, 50), "ms", None),
                    Figure(f"latency_p99@{rate:g}/s", percentile(latencies, 99), "ms", 50.0)]
    return figures


async def _measure(rate: float, count: int, warm_up: int) -> list[float]:
    with KafkaBroker() as kafka, PostgresServer() as postgres:
        dsn = postgres.create_database("floor")
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, DEFAULT_PARTITIONS, 1) for topic in TOPICS])
        finally:
            await admin.close()
        relays = []
        try:
            for (name, inserts), source, target in zip(HOPS, TOPICS, TOPICS[1:]):
                relays.append(subprocess.Popen(
                    [sys.executable, "-m", "bench.kafka_floor", "relay", kafka.bootstrap, source, target,
                     dsn if inserts else ""], cwd=ROOT, stdout=subprocess.PIPE))
                if relays[-1].stdout.readline().strip() != b"ready":
                    raise RuntimeError(f"the {name} relay did not start")
            return await _load(kafka.bootstrap, rate, count, warm_up)
        finally:
            for relay in relays:
                relay.kill()
                relay.wait()


async def _load(bootstrap: str, rate: float, count: int, warm_up: int) -> list[float]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    consumer = AIOKafkaConsumer(TOPICS[-1], bootstrap_servers=bootstrap, group_id="floor-receiver",
                                auto_offset_reset="earliest")
    await producer.start()
    await consumer.start()
    received: dict[bytes, float] = {}
    receiving = asyncio.create_task(_receive(consumer, received))
    try:
        if warm_up:
            await _send(producer, rate, [f"warm-{i}".encode() for i in range(warm_up)], received)
        return await _send(producer, rate, [f"measured-{i}".encode() for i in range(count)], received)
    finally:
        receiving.cancel()
        await asyncio.gather(receiving, return_exceptions=True)
        await consumer.stop()
        await producer.stop()


async def _send(producer: AIOKafkaProducer, rate: float, values: list[bytes], received: dict[bytes, float]) -> list[float]:
    """Open loop at `rate`, then wait for every value at the end of the path; the sorted latencies (ms)."""
    sent, sending, start = {}, [], time.perf_counter()
    for index, value in enumerate(values):
        await asyncio.sleep(max(start + index / rate - time.perf_counter(), 0.0))
        sent[value] = time.perf_counter()
        sending.append(asyncio.ensure_future(producer.send(TOPICS[0], value, key=str(index % 1000).encode())))
    await asyncio.gather(*sending)
    deadline = time.perf_counter() + DRAIN_TIMEOUT
    while any(value not in received for value in sent) and time.perf_counter() < deadline:
        await asyncio.sleep(0.05)
    latencies = sorted((received[value] - at) * 1000 for value, at in sent.items() if value in received)
    if not latencies:
        raise RuntimeError(f"nothing came through within {DRAIN_TIMEOUT:.0f} s")
    return latencies


async def _receive(consumer: AIOKafkaConsumer, received: dict[bytes, float]) -> None:
    while True:
        batches = await consumer.getmany(timeout_ms=200)
        now = time.perf_counter()
        for records in batches.values():
            for record in records:
                received.setdefault(record.value, now)


async def relay(bootstrap: str, source: str, target: str, dsn: str) -> None:
    """One trivial service: every poll of `source` inserted into PostgreSQL (when `dsn`) in one
    transaction, then published to `target` and acknowledged."""
    connection = await psycopg.AsyncConnection.connect(dsn, autocommit=True) if dsn else None
    table = "events_" + source.replace(".", "_").replace("-", "_")
    if connection is not None:
        await connection.execute(f"CREATE TABLE IF NOT EXISTS {table} (position bigserial PRIMARY KEY,"
                                 " id text UNIQUE NOT NULL, data bytea NOT NULL)")
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    consumer = AIOKafkaConsumer(source, bootstrap_servers=bootstrap, group_id=f"floor-{source}",
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await producer.start()
    await consumer.start()
    print("ready", flush=True)
    while True:
        records = [r for batch in (await consumer.getmany(timeout_ms=1000, max_records=500)).values() for r in batch]
        if not records:
            continue
        if connection is not None:
            async with connection.transaction(), connection.cursor() as cursor:
                await cursor.executemany(f"INSERT INTO {table} (id, data) VALUES (%s, %s)",
                                         [(f"{r.topic}:{r.partition}:{r.offset}", r.value) for r in records])
        await asyncio.gather(*[await producer.send(target, r.value, key=r.key) for r in records])


if __name__ == "__main__" and sys.argv[1:2] == ["relay"]:
    asyncio.run(relay(*sys.argv[2:6]))
