"""The Kafka bus (aiokafka) against a real single-node broker: the bus contract, plus what only it promises.

One broker serves the whole module (tests.support.kafka.KafkaBroker: the jars from Maven Central
via deploy/kafka/fetch.sh, Java 17). A broker that cannot start fails the module: it never skips.
"""
from __future__ import annotations

import asyncio
import random
import subprocess
import time

import pytest
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.partitioner import DefaultPartitioner

from sluice.bus import Message, TopicPartition, TopicSpec, UnknownTopic, kafka_partition
from sluice.bus.kafka import KafkaBus, _partition_of
from tests.support.kafka import KafkaBroker
from tests.integration.bus.contract import DurableBusContract

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def kafka_broker():
    with KafkaBroker() as broker:
        yield broker


class TestKafkaBus(DurableBusContract):
    settle_timeout = 30.0  # a rebalance takes a heartbeat or two; a group's first join creates __consumer_offsets

    @pytest.fixture(autouse=True)
    def _broker(self, kafka_broker: KafkaBroker) -> None:
        self.bootstrap = kafka_broker.bootstrap

    async def make_bus(self, tmp_path) -> KafkaBus:
        return KafkaBus(self.bootstrap)

    async def reopen(self, bus, tmp_path) -> KafkaBus:
        return KafkaBus(self.bootstrap)  # the broker keeps records and committed offsets


# -- what only the Kafka adapter promises ----------------------------------------------------------

JAVA_PARTITIONS = """
import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;
public class Partitions {
    public static void main(String[] args) {  // args: partition counts (comma-separated), then hex keys
        String[] counts = args[0].split(",");
        for (int i = 1; i < args.length; i++) {
            byte[] key = java.util.HexFormat.of().parseHex(args[i]);
            StringBuilder line = new StringBuilder();
            for (String n : counts) line.append(BuiltInPartitioner.partitionForKey(key, Integer.parseInt(n))).append(' ');
            System.out.println(line.toString().trim());
        }
    }
}
"""


def test_partitioner_is_the_java_clients(kafka_broker: KafkaBroker, tmp_path) -> None:
    """kafka_partition, KafkaBus's producers' partitioner, aiokafka's default partitioner and the
    Java client's BuiltInPartitioner (from the broker's jars) put every key on the same partition."""
    rng = random.Random(20260301)
    keys = [b"", b"a", b"schedule-42"] + [rng.randbytes(rng.randint(1, 40)) for _ in range(300)]
    source = tmp_path / "Partitions.java"
    source.write_text(JAVA_PARTITIONS)
    counts = (1, 3, 7, 12)
    java = subprocess.run(
        ["java", "-cp", f"{kafka_broker.libs}/*", str(source), ",".join(map(str, counts)), *(k.hex() for k in keys)],
        capture_output=True, text=True, check=True, timeout=120,
    )
    java_partitions = [[int(p) for p in line.split()] for line in java.stdout.splitlines()]
    assert len(java_partitions) == len(keys)
    for column, partitions in enumerate(counts):
        expected = [row[column] for row in java_partitions]
        everything = list(range(partitions))
        assert [DefaultPartitioner()(k, everything, everything) for k in keys] == expected
        assert [kafka_partition(k, partitions) for k in keys] == expected
        assert [_partition_of(k, everything, everything) for k in keys] == expected


async def test_producer_puts_a_key_where_kafka_partition_does(kafka_broker: KafkaBroker) -> None:
    bus = KafkaBus(kafka_broker.bootstrap)
    try:
        topic = f"partitioner-{time.time_ns()}"
        await bus.create_topics([TopicSpec(topic, 5)])
        producer = bus.producer()
        keys = [f"job-{i}".encode() for i in range(30)]
        sent = [await producer.send(topic, b"v", key=key) for key in keys]
        assert [p for p, _ in sent] == [kafka_partition(k, 5) for k in keys]
        assert (await producer._started())._partitioner is _partition_of
    finally:
        await bus.close()


async def test_unknown_topic_fails_fast_and_is_not_created(kafka_broker: KafkaBroker) -> None:
    bus = KafkaBus(kafka_broker.bootstrap)
    try:
        producer = bus.producer()
        await producer.send(await _topic(bus), b"warm up")  # connected, so the timing is the check alone
        missing = f"missing-{time.time_ns()}"
        started = time.monotonic()
        with pytest.raises(UnknownTopic, match=missing):
            await producer.send(missing, b"v")
        assert time.monotonic() - started < 2.0  # not aiokafka's 40 s wait for the topic to appear
        admin = await bus._admin_client()
        assert missing not in await admin.list_topics()
    finally:
        await bus.close()


async def test_compacted_topics_are_compacted_on_the_broker(kafka_broker: KafkaBroker) -> None:
    bus = KafkaBus(kafka_broker.bootstrap)
    try:
        plain, compacted = f"plain-{time.time_ns()}", f"compacted-{time.time_ns()}"
        await bus.create_topics([TopicSpec(plain, 1), TopicSpec(compacted, 2, compacted=True)])
        admin = await bus._admin_client()
        responses = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, name) for name in (plain, compacted)])
        policy = {
            resource[3]: {entry[0]: entry[1] for entry in resource[4]}["cleanup.policy"]
            for response in responses for resource in response.resources
        }
        assert policy == {plain: "delete", compacted: "compact"}
    finally:
        await bus.close()


async def test_a_subscriber_gets_partitions_of_a_topic_created_later(kafka_broker: KafkaBroker) -> None:
    bus = KafkaBus(kafka_broker.bootstrap, metadata_max_age_ms=500)
    try:
        late = f"late-{time.time_ns()}"
        consumer = bus.consumer(f"group-{time.time_ns()}", [late])
        assert await consumer.poll(timeout=0.5) == [] and consumer.assignment() == set()
        await bus.create_topics([TopicSpec(late, 2)])
        await bus.producer().send(late, b"first", key=b"k")
        records = []
        deadline = time.monotonic() + 30
        while not records and time.monotonic() < deadline:
            records = await consumer.poll(timeout=0.2)
        assert [r.value for r in records] == [b"first"]
        assert consumer.assignment() == {TopicPartition(late, 0), TopicPartition(late, 1)}
    finally:
        await bus.close()


async def test_a_busy_partition_does_not_wait_for_a_fetch_of_idle_ones(kafka_broker: KafkaBroker) -> None:
    """A record polled 200 ms after it was fetched (a slow poll): meanwhile aiokafka fetched the member's
    other partitions, all idle, and the broker holds that fetch up to fetch_max_wait_ms; the next record
    of the busy partition is fetched only after it. At aiokafka's 500 ms every round took over 400 ms."""
    bus = KafkaBus(kafka_broker.bootstrap)
    try:
        busy, idle = f"busy-{time.time_ns()}", f"idle-{time.time_ns()}"
        await bus.create_topics([TopicSpec(busy, 1), TopicSpec(idle, 4)])
        consumer, producer = bus.consumer(f"group-{time.time_ns()}", [busy, idle]), bus.producer()
        await producer.send(busy, b"joined")
        assert [r.value for r in await _polled(consumer, 1)] == [b"joined"]
        latencies = []
        for round_ in range(3):
            await producer.send(busy, b"fetched")
            await asyncio.sleep(0.2)  # fetched meanwhile, and held unpolled past aiokafka's prefetch backoff
            assert [r.value for r in await _polled(consumer, 1)] == [b"fetched"]
            sent = time.monotonic()
            await producer.send(busy, b"next")
            assert [r.value for r in await _polled(consumer, 1)] == [b"next"]
            latencies.append(time.monotonic() - sent)
        assert min(latencies) < 0.35, latencies
    finally:
        await bus.close()


async def _polled(consumer, count: int, timeout: float = 30.0) -> list:
    records, deadline = [], time.monotonic() + timeout
    while len(records) < count and time.monotonic() < deadline:
        records += await consumer.poll(timeout=0.05)
    return records


async def _topic(bus: KafkaBus) -> str:
    name = f"topic-{time.time_ns()}"
    await bus.create_topics([TopicSpec(name)])
    return name


async def test_a_send_batch_larger_than_one_kafka_batch_keeps_its_order(kafka_broker: KafkaBroker) -> None:
    """send_batch builds one aiokafka batch per partition and starts another when one fills (16 KiB):
    every record still lands once, in order, at the offset it was reported at."""
    bus = KafkaBus(kafka_broker.bootstrap)
    try:
        topic = await _topic(bus)
        values = [f"{index:04d}".encode() + bytes(1000) for index in range(60)] + [b"big" + bytes(40_000), b"last"]
        producer = bus.producer()
        sent = await producer.send_batch([Message(topic, value, b"k", [("n", str(n).encode())])
                                          for n, value in enumerate(values)])
        assert sent == [(0, offset) for offset in range(len(values))]
        consumer = bus.consumer(f"group-{time.time_ns()}", [topic])
        records: list = []
        deadline = time.monotonic() + 30
        while len(records) < len(values) and time.monotonic() < deadline:
            records += await consumer.poll(timeout=1.0)
        assert [(r.offset, r.value, r.headers) for r in records] == [
            (n, value, (("n", str(n).encode()),)) for n, value in enumerate(values)]
    finally:
        await bus.close()


async def test_concurrent_sends_and_batches_to_one_partition_all_land_in_order(kafka_broker: KafkaBroker) -> None:
    """Many single sends and batches at once to one partition (a producer shared by a service's relays,
    the bench's paced sends): none waits for another's batch to drain, each lands once, a batch's
    records consecutive."""
    bus = KafkaBus(kafka_broker.bootstrap)
    try:
        topic = await _topic(bus)
        producer = bus.producer()
        await producer.send(topic, b"warm up")
        singles = [producer.send(topic, f"s{n}".encode(), key=b"k") for n in range(300)]
        batches = [producer.send_batch([Message(topic, f"b{b}-{n}".encode(), b"k") for n in range(40)])
                   for b in range(5)]
        results = await asyncio.wait_for(asyncio.gather(*singles, *batches), 60)
        single_offsets = [offset for _, offset in results[:300]]
        batch_offsets = [[offset for _, offset in sent] for sent in results[300:]]
        for offsets in batch_offsets:
            assert offsets == list(range(offsets[0], offsets[0] + 40))
        assert sorted(single_offsets + [o for offsets in batch_offsets for o in offsets]) == list(range(1, 501))
    finally:
        await bus.close()
