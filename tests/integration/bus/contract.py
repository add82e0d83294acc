"""The bus contract: Kafka's semantics every Bus adapter must keep.

Subclass BusContract in a test_*.py module and implement `make_bus` (and `reopen` when the adapter
is durable across restarts). The tests use the port only, so the in-process adapter and the
aiokafka adapter against a real broker run the same suite: topic and group names are unique per
test, and every wait for a rebalance polls until the expected assignment or `settle_timeout`.
"""
from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence

import pytest

from sluice.bus import Bus, CommitFailed, Consumer, Message, Record, TopicPartition, TopicSpec, UnknownTopic, kafka_partition


def key_for(partition: int, partitions: int, prefix: str = "k") -> bytes:
    """A key that Kafka's partitioner puts on `partition`."""
    for i in range(100_000):
        key = f"{prefix}-{i}".encode()
        if kafka_partition(key, partitions) == partition:
            return key
    raise AssertionError(f"no key for partition {partition}/{partitions}")


def where(records: Sequence[Record]) -> list[tuple[int, int]]:
    return [(r.partition, r.offset) for r in records]


class BusContract:
    settle_timeout: float = 5.0  # how long a rebalance or a delivery may take; raise it for a real broker

    async def make_bus(self, tmp_path) -> Bus:
        raise NotImplementedError

    async def reopen(self, bus: Bus, tmp_path) -> Bus:
        """A new bus over the same storage after `bus` was closed (durable adapters only)."""
        raise NotImplementedError

    # -- helpers --------------------------------------------------------------------------------

    @pytest.fixture
    async def bus(self, tmp_path):
        bus = await self.make_bus(tmp_path)
        try:
            yield bus
        finally:
            await bus.close()

    @staticmethod
    def name(kind: str) -> str:
        return f"contract-{kind}-{uuid.uuid4().hex[:10]}"

    async def topic(self, bus: Bus, partitions: int = 1, *, compacted: bool = False) -> str:
        name = self.name("topic")
        await bus.create_topics([TopicSpec(name, partitions, compacted)])
        return name

    async def settle(self, consumers: Sequence[Consumer], done: Callable[[], bool]) -> list[list[Record]]:
        """Poll the consumers until `done()` (a rebalance completed); return what they polled meanwhile."""
        polled: list[list[Record]] = [[] for _ in consumers]
        deadline = time.monotonic() + self.settle_timeout
        while not done():
            if time.monotonic() > deadline:
                raise AssertionError(f"assignment did not settle: {[sorted(c.assignment()) for c in consumers]}")
            for i, consumer in enumerate(consumers):
                polled[i] += await consumer.poll(timeout=0.05)
        return polled

    async def settle_on(self, consumer: Consumer, expected: set[TopicPartition]) -> list[Record]:
        (polled,) = await self.settle([consumer], lambda: consumer.assignment() == expected)
        return polled

    async def drain(
        self, consumers: Sequence[Consumer], count: int, *, commit: bool = False, polled: list[list[Record]] | None = None
    ) -> list[list[Record]]:
        """Poll the consumers until together they returned `count` records (counting `polled`)."""
        polled = polled or [[] for _ in consumers]
        deadline = time.monotonic() + self.settle_timeout
        while sum(map(len, polled)) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"expected {count} records, got {[where(p) for p in polled]}")
            for i, consumer in enumerate(consumers):
                records = await consumer.poll(timeout=0.05)
                polled[i] += records
                if commit and records:
                    await consumer.commit()
        return polled

    async def drain_all(self, consumer: Consumer, at_least: int, polled: list[Record] | None = None) -> list[Record]:
        """drain(), then keep polling until a poll comes back empty, to catch anything beyond `at_least`."""
        (records,) = await self.drain([consumer], at_least, polled=[polled or []])
        while batch := await consumer.poll(timeout=0.2):
            records += batch
        return records

    async def send_all(self, bus: Bus, topic: str, keys: Sequence[bytes | None]) -> list[tuple[int, int]]:
        producer = bus.producer()
        try:
            return [await producer.send(topic, f"v{i}".encode(), key=key) for i, key in enumerate(keys)]
        finally:
            await producer.close()

    # -- topics and partitioning ----------------------------------------------------------------

    async def test_create_topics_is_idempotent_and_keeps_existing_topics(self, bus: Bus) -> None:
        name, other = self.name("topic"), self.name("topic")
        await bus.create_topics([TopicSpec(name, 3)])
        await bus.create_topics([TopicSpec(name, 3)])
        await bus.create_topics([TopicSpec(name, 5), TopicSpec(other, 2)])  # existing: left as it is
        keys = [f"key-{i}".encode() for i in range(40)]
        sent = await self.send_all(bus, name, keys)
        assert [p for p, _ in sent] == [kafka_partition(k, 3) for k in keys]
        assert {p for p, _ in await self.send_all(bus, other, keys)} == {0, 1}

    async def test_same_key_same_partition_as_kafka(self, bus: Bus) -> None:
        topic = await self.topic(bus, 4)
        keys = [f"schedule-{i}".encode() for i in range(25)]
        first, second = await self.send_all(bus, topic, keys), await self.send_all(bus, topic, keys)
        assert [p for p, _ in first] == [p for p, _ in second] == [kafka_partition(k, 4) for k in keys]
        assert len({p for p, _ in first}) == 4

    async def test_offsets_are_contiguous_from_zero_per_partition(self, bus: Bus) -> None:
        topic = await self.topic(bus, 3)
        sent = await self.send_all(bus, topic, [f"k{i % 7}".encode() for i in range(30)] + [None] * 9)
        assert {p for p, _ in sent} <= {0, 1, 2}
        for partition in range(3):
            offsets = [o for p, o in sent if p == partition]
            assert offsets == list(range(len(offsets)))

    async def test_send_batch_appends_in_order_after_single_sends(self, bus: Bus) -> None:
        topic, other = await self.topic(bus, 3), await self.topic(bus, 1)
        single = await self.send_all(bus, topic, [b"a", b"b"])
        keys = [f"k{i % 5}".encode() for i in range(20)]
        producer = bus.producer()
        try:
            sent = await producer.send_batch([Message(topic, f"b{i}".encode(), key, [("h", str(i).encode())])
                                              for i, key in enumerate(keys)] + [Message(other, b"o")])
            assert await producer.send_batch([]) == []
        finally:
            await producer.close()
        assert [p for p, _ in sent[:-1]] == [kafka_partition(k, 3) for k in keys] and sent[-1] == (0, 0)
        for partition in range(3):
            offsets = [o for p, o in single + sent[:-1] if p == partition]
            assert offsets == list(range(len(offsets)))
        records = await self.drain_all(bus.consumer(self.name("group"), [topic]), len(keys) + 2)
        batch = sorted((r for r in records if r.value.startswith(b"b")), key=lambda r: (r.partition, r.offset))
        assert [(r.partition, r.offset) for r in batch] == sorted(sent[:-1])
        for record in batch:
            index = int(record.value[1:])
            assert (record.key, record.headers) == (keys[index], (("h", str(index).encode()),))

    async def test_send_to_unknown_topic_fails_clearly(self, bus: Bus) -> None:
        missing = self.name("missing")
        producer = bus.producer()
        with pytest.raises(UnknownTopic, match=missing):
            await producer.send(missing, b"v", key=b"k")
        await producer.close()

    # -- polling --------------------------------------------------------------------------------

    async def test_poll_returns_records_in_offset_order_with_fields_intact(self, bus: Bus) -> None:
        topic = await self.topic(bus, 2)
        producer = bus.producer()
        sent: dict[tuple[int, int], tuple] = {}
        for i in range(20):
            key = None if i % 5 == 0 else f"job-{i % 3}".encode()
            value = bytes([i, 0, 255]) + f"payload-{i}".encode()
            headers = (("type", b"JobTriggered"), ("trace", bytes([i, 0xFF])), ("type", b"again"))
            partition, offset = await producer.send(topic, value, key=key, headers=headers)
            sent[(partition, offset)] = (key, value, headers)
        consumer = bus.consumer(self.name("group"), [topic])
        (records,) = await self.drain([consumer], len(sent))
        assert sorted(where(records)) == sorted(sent)
        for partition in (0, 1):
            offsets = [r.offset for r in records if r.partition == partition]
            assert offsets == sorted(offsets)
        for r in records:
            assert r.topic == topic
            assert (r.key, r.value, r.headers) == sent[(r.partition, r.offset)]
            assert isinstance(r.timestamp_ms, int) and r.timestamp_ms > 0

    async def test_poll_respects_max_records(self, bus: Bus) -> None:
        topic = await self.topic(bus, 2)
        consumer = bus.consumer(self.name("group"), [topic])
        # settle first, on the empty topic: records polled while a real broker assigns the
        # partitions would come in batches of settle's size, not of max_records
        assert await self.settle_on(consumer, {TopicPartition(topic, 0), TopicPartition(topic, 1)}) == []
        await self.send_all(bus, topic, [key_for(0, 2)] * 5 + [key_for(1, 2)] * 5)
        deadline = time.monotonic() + self.settle_timeout
        batches: list[list[Record]] = []
        while sum(map(len, batches)) < 10 and time.monotonic() < deadline:
            batches.append(await consumer.poll(timeout=0.2, max_records=3))
        assert all(len(batch) <= 3 for batch in batches)
        assert sorted(where([r for b in batches for r in b])) == [(p, o) for p in (0, 1) for o in range(5)]

    async def test_poll_on_empty_topic_times_out_promptly(self, bus: Bus) -> None:
        topic = await self.topic(bus, 2)
        consumer = bus.consumer(self.name("group"), [topic])
        assert await self.settle_on(consumer, {TopicPartition(topic, 0), TopicPartition(topic, 1)}) == []
        started = time.monotonic()
        assert await consumer.poll(timeout=0.3) == []
        assert 0.2 <= time.monotonic() - started < 1.5

    async def test_waiting_poll_is_woken_by_a_send(self, bus: Bus) -> None:
        topic = await self.topic(bus, 1)
        consumer = bus.consumer(self.name("group"), [topic])
        await self.settle_on(consumer, {TopicPartition(topic, 0)})
        waiting = asyncio.create_task(consumer.poll(timeout=self.settle_timeout + 10))
        await asyncio.sleep(0.1)  # let the poll start waiting
        assert not waiting.done()
        producer = bus.producer()
        await producer.send(topic, b"wake up", key=b"k")
        sent_at = time.monotonic()
        records = await asyncio.wait_for(waiting, self.settle_timeout)
        assert time.monotonic() - sent_at < 1.0
        assert [(r.offset, r.value) for r in records] == [(0, b"wake up")]
        await producer.close()

    async def test_compacted_topic_shows_latest_value_per_key(self, bus: Bus) -> None:
        topic = await self.topic(bus, 2, compacted=True)
        producer = bus.producer()
        for key, value in [(b"s1", b"v1"), (b"s2", b"v1"), (b"s1", b"v2"), (b"s3", b"v1"), (b"s1", b"v3")]:
            await producer.send(topic, value, key=key)
        consumer = bus.consumer(self.name("group"), [topic])
        records = await self.drain_all(consumer, 3)
        latest = {}
        for r in sorted(records, key=lambda r: (r.partition, r.offset)):
            latest[r.key] = r.value
        assert latest == {b"s1": b"v3", b"s2": b"v1", b"s3": b"v1"}

    # -- consumer groups ------------------------------------------------------------------------

    async def test_two_groups_each_see_every_record(self, bus: Bus) -> None:
        topic = await self.topic(bus, 3)
        sent = await self.send_all(bus, topic, [f"k{i}".encode() for i in range(15)])
        first = bus.consumer(self.name("group"), [topic])
        (seen_first,) = await self.drain([first], 15, commit=True)
        second = bus.consumer(self.name("group"), [topic])  # not affected by the first group's commits
        (seen_second,) = await self.drain([second], 15)
        assert sorted(where(seen_first)) == sorted(where(seen_second)) == sorted(sent)

    async def test_members_of_a_group_split_partitions_and_consume_each_record_once(self, bus: Bus) -> None:
        topic = await self.topic(bus, 4)
        group = self.name("group")
        a, b = bus.consumer(group, [topic]), bus.consumer(group, [topic])
        everything = {TopicPartition(topic, p) for p in range(4)}
        await self.settle([a, b], lambda: a.assignment() | b.assignment() == everything
                          and not a.assignment() & b.assignment() and bool(a.assignment()) and bool(b.assignment()))
        sent = await self.send_all(bus, topic, [f"k{i}".encode() for i in range(40)])
        got_a, got_b = await self.drain([a, b], 40, commit=True)
        assert {TopicPartition(topic, r.partition) for r in got_a} <= a.assignment()
        assert {TopicPartition(topic, r.partition) for r in got_b} <= b.assignment()
        assert sorted(where(got_a + got_b)) == sorted(sent)  # each exactly once
        assert await a.poll(timeout=0.1) == [] and await b.poll(timeout=0.1) == []

    async def test_leaving_member_hands_over_from_the_committed_offset(self, bus: Bus) -> None:
        topic = await self.topic(bus, 2)
        group = self.name("group")
        a, b = bus.consumer(group, [topic]), bus.consumer(group, [topic])
        await self.settle([a, b], lambda: len(a.assignment()) == len(b.assignment()) == 1)
        (mine,), (theirs,) = a.assignment(), b.assignment()
        await self.send_all(bus, topic, [key_for(0, 2)] * 10 + [key_for(1, 2)] * 10)
        (got_a,) = await self.drain([a], 10)
        (got_b,) = await self.drain([b], 10)
        assert [r.offset for r in got_a] == list(range(10))
        await a.commit({mine: 4})  # offsets 4..9 polled but not committed
        await b.commit()
        await a.close()
        polled = await self.settle_on(b, {mine, theirs})
        redelivered = await self.drain_all(b, 6, polled)
        assert where(redelivered) == [(mine.partition, o) for o in range(4, 10)]

    async def test_explicit_commit_is_the_next_offset_to_read(self, bus: Bus) -> None:
        topic = await self.topic(bus, 1)
        group = self.name("group")
        await self.send_all(bus, topic, [b"k"] * 10)
        first = bus.consumer(group, [topic])
        (records,) = await self.drain([first], 10)
        await first.commit({TopicPartition(topic, 0): 3})
        await first.close()
        second = bus.consumer(group, [topic])
        records = await self.drain_all(second, 7)
        assert [r.offset for r in records] == list(range(3, 10))

    async def test_commit_of_an_unassigned_partition_fails(self, bus: Bus) -> None:
        topic, other = await self.topic(bus, 2), await self.topic(bus, 1)
        group = self.name("group")
        a, b = bus.consumer(group, [topic]), bus.consumer(group, [topic])
        await self.settle([a, b], lambda: len(a.assignment()) == len(b.assignment()) == 1)
        (theirs,) = b.assignment()
        with pytest.raises(CommitFailed):
            await a.commit({theirs: 1})
        with pytest.raises(CommitFailed):
            await a.commit({TopicPartition(other, 0): 1})

    async def test_new_consumer_resumes_from_committed_offsets(self, bus: Bus) -> None:
        topic = await self.topic(bus, 2)
        group = self.name("group")
        await self.send_all(bus, topic, [f"k{i}".encode() for i in range(10)])
        first = bus.consumer(group, [topic])
        (old,) = await self.drain([first], 10)
        await first.commit()
        await first.close()
        new = await self.send_all(bus, topic, [f"k{i}".encode() for i in range(10, 15)])
        second = bus.consumer(group, [topic])
        records = await self.drain_all(second, 5)
        assert sorted(where(records)) == sorted(new)
        assert not set(where(records)) & set(where(old))

    # -- durability -----------------------------------------------------------------------------


class DurableBusContract(BusContract):
    """The contract of buses that keep records and offsets across a restart: their test classes subclass this."""

    async def test_records_and_committed_offsets_survive_reopen(self, tmp_path) -> None:
        bus = await self.make_bus(tmp_path)
        try:
            topic = await self.topic(bus, 1)
            group = self.name("group")
            await self.send_all(bus, topic, [b"k"] * 10)
            consumer = bus.consumer(group, [topic])
            await self.drain([consumer], 10)
            await consumer.commit({TopicPartition(topic, 0): 6})
        finally:
            await bus.close()
        reopened = await self.reopen(bus, tmp_path)
        try:
            assert await self.send_all(reopened, topic, [b"k"]) == [(0, 10)]
            (resumed,) = await self.drain([reopened.consumer(group, [topic])], 5)
            assert [(r.offset, r.value) for r in resumed] == [(o, f"v{o}".encode()) for o in range(6, 10)] + [(10, b"v0")]
            (everything,) = await self.drain([reopened.consumer(self.name("group"), [topic])], 11)
            assert [r.offset for r in everything] == list(range(11))
        finally:
            await reopened.close()
