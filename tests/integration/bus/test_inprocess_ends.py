"""The in-process bus reads only partitions with something new, and still misses nothing that
another bus object or another process appends to the same file."""
from __future__ import annotations

import asyncio
import random
import sqlite3
import sys
import textwrap
import time

import pytest

from sluice.bus import Message, Record, TopicPartition, TopicSpec
from sluice.bus.inprocess import InProcessBus
from sluice.bus.inprocess_store import BusStore
from tests.integration.bus.contract import key_for


@pytest.fixture
def reads(monkeypatch) -> list[TopicPartition]:
    """Every partition the bus reads records from (from memory or from the file), in order."""
    calls: list[TopicPartition] = []
    original = InProcessBus._read

    def spy(bus: InProcessBus, tp: TopicPartition, start: int, limit: int) -> list[Record]:
        calls.append(tp)
        return original(bus, tp, start, limit)

    monkeypatch.setattr(InProcessBus, "_read", spy)
    return calls


@pytest.fixture
def file_reads(monkeypatch) -> list[tuple[TopicPartition, int]]:
    """Every (partition, offset) the bus reads from the file, in order."""
    calls: list[tuple[TopicPartition, int]] = []
    original = BusStore.read

    def spy(store: BusStore, tp: TopicPartition, start: int, limit: int) -> list[Record]:
        calls.append((tp, start))
        return original(store, tp, start, limit)

    monkeypatch.setattr(BusStore, "read", spy)
    return calls


async def test_a_poll_reads_only_the_partition_with_a_new_record(tmp_path, reads) -> None:
    bus = InProcessBus(tmp_path / "bus.db")
    await bus.create_topics([TopicSpec("t", 12)])
    consumer = bus.consumer("g", ["t"])
    producer = bus.producer()
    for partition in range(12):  # every partition has old records, consumed already
        await producer.send("t", b"old", key=key_for(partition, 12))
    assert len(await consumer.poll(timeout=0)) == 12
    reads.clear()

    await producer.send("t", b"new", key=key_for(5, 12))
    assert [(r.partition, r.value) for r in await consumer.poll(timeout=0)] == [(5, b"new")]
    assert reads == [TopicPartition("t", 5)]
    reads.clear()
    assert await consumer.poll(timeout=0) == []
    assert reads == []
    await bus.close()


async def test_a_partition_written_after_many_empty_polls_is_read(tmp_path, reads) -> None:
    bus = InProcessBus(tmp_path / "bus.db")
    await bus.create_topics([TopicSpec("t", 12)])
    consumer = bus.consumer("g", ["t"])
    for _ in range(200):
        assert await consumer.poll(timeout=0) == []
    assert reads == []
    await bus.producer().send("t", b"late", key=key_for(11, 12))
    assert [(r.partition, r.offset, r.value) for r in await consumer.poll(timeout=0)] == [(11, 0, b"late")]
    await bus.close()


async def test_another_bus_on_the_file_is_seen_within_the_poll_interval(tmp_path) -> None:
    path = tmp_path / "bus.db"
    writer, reader = InProcessBus(path, poll_interval=0.2), InProcessBus(path, poll_interval=0.2)
    await writer.create_topics([TopicSpec("t", 12)])
    consumer = reader.consumer("g", ["t"])
    for _ in range(50):
        assert await consumer.poll(timeout=0) == []
    await writer.producer().send("t", b"from the other bus", key=key_for(3, 12))
    # one wait of poll_interval runs out, the ends are read again, the record comes
    started = time.monotonic()
    assert [r.value for r in await consumer.poll(timeout=0.25)] == [b"from the other bus"]
    assert time.monotonic() - started < 0.25 + 0.5
    await writer.close()
    await reader.close()


async def test_a_consumer_kept_busy_by_local_sends_still_sees_another_bus(tmp_path) -> None:
    """Its polls never wait (timeout=0), so only the refresh at least every poll_interval finds the record."""
    path = tmp_path / "bus.db"
    writer, reader = InProcessBus(path, poll_interval=0.05), InProcessBus(path, poll_interval=0.05)
    await writer.create_topics([TopicSpec("t", 2)])
    consumer = reader.consumer("g", ["t"])
    local = reader.producer()
    await writer.producer().send("t", b"remote", key=key_for(1, 2))
    seen: list[bytes] = []
    deadline = time.monotonic() + 5
    while b"remote" not in seen and time.monotonic() < deadline:
        await local.send("t", b"local", key=key_for(0, 2))
        seen += [r.value for r in await consumer.poll(timeout=0)]
    assert b"remote" in seen
    await writer.close()
    await reader.close()


async def test_interleaved_writers_on_one_file_lose_and_reorder_nothing(tmp_path) -> None:
    path = tmp_path / "bus.db"
    buses = [InProcessBus(path, poll_interval=0.01), InProcessBus(path, poll_interval=0.01)]
    await buses[0].create_topics([TopicSpec("t", 4)])
    producers = [bus.producer() for bus in buses]
    consumers = [bus.consumer(f"g{i}", ["t"]) for i, bus in enumerate(buses)]
    polled: list[list[Record]] = [[], []]
    rng = random.Random(7)
    sent = 0
    while sent < 400:
        if rng.random() < 0.6:
            await producers[rng.randrange(2)].send("t", f"m{sent}".encode(), key=key_for(rng.randrange(4), 4))
            sent += 1
        else:
            i = rng.randrange(2)
            polled[i] += await consumers[i].poll(timeout=rng.choice([0, 0, 0.015]), max_records=rng.randint(1, 20))
    for i, consumer in enumerate(consumers):
        deadline = time.monotonic() + 5
        while len(polled[i]) < sent and time.monotonic() < deadline:
            polled[i] += await consumer.poll(timeout=0.05)
    for records in polled:
        per_partition = {p: [r.offset for r in records if r.partition == p] for p in range(4)}
        assert sum(map(len, per_partition.values())) == sent
        assert all(offsets == list(range(len(offsets))) for offsets in per_partition.values())
    for bus in buses:
        await bus.close()


async def test_rotation_still_serves_every_partition(tmp_path) -> None:
    bus = InProcessBus(tmp_path / "bus.db")
    await bus.create_topics([TopicSpec("t", 3)])
    consumer = bus.consumer("g", ["t"])
    producer = bus.producer()
    for partition in range(3):
        for _ in range(10):
            await producer.send("t", b"v", key=key_for(partition, 3))
    first_three = [(await consumer.poll(timeout=0, max_records=1))[0].partition for _ in range(3)]
    assert sorted(first_three) == [0, 1, 2]
    await bus.close()


@pytest.mark.integration
async def test_records_of_another_process_are_all_polled(tmp_path) -> None:
    path = tmp_path / "bus.db"
    bus = InProcessBus(path, poll_interval=0.05)
    await bus.create_topics([TopicSpec("t", 8)])
    consumer = bus.consumer("g", ["t"])
    assert await consumer.poll(timeout=0) == []
    writer = textwrap.dedent(f"""
        import asyncio
        from sluice.bus.inprocess import InProcessBus

        async def main():
            bus = InProcessBus({str(path)!r})
            producer = bus.producer()
            for i in range(200):
                await producer.send("t", str(i).encode(), key=str(i).encode())
            await bus.close()

        asyncio.run(main())
    """)
    process = await asyncio.create_subprocess_exec(sys.executable, "-c", writer)
    local = bus.producer()
    polled: list[Record] = []
    sent_here = 0
    while process.returncode is None:  # this process appends to the same partitions meanwhile
        await local.send("t", f"local{sent_here}".encode())
        sent_here += 1
        polled += await consumer.poll(timeout=0.01)
        await asyncio.sleep(0.002)  # lets the loop notice the writer's exit
    assert await process.wait() == 0
    deadline = time.monotonic() + 10
    while len(polled) < 200 + sent_here and time.monotonic() < deadline:
        polled += await consumer.poll(timeout=0.1)
    assert sorted(int(r.value) for r in polled if not r.value.startswith(b"local")) == list(range(200))
    for partition in range(8):
        offsets = [r.offset for r in polled if r.partition == partition]
        assert offsets == list(range(len(offsets)))
    await bus.close()


async def test_a_consumer_that_keeps_up_gets_this_bus_s_sends_from_memory_as_the_file_has_them(
        tmp_path, file_reads) -> None:
    bus = InProcessBus(tmp_path / "bus.db")
    await bus.create_topics([TopicSpec("t", 2)])
    consumer = bus.consumer("g", ["t"])
    producer = bus.producer()
    await producer.send_batch([Message("t", b"a", key_for(0, 2), [("h", bytearray(b"\x00\x01"))]),
                               Message("t", b"b", key_for(1, 2)), Message("t", b"c", key_for(0, 2))])
    polled = await consumer.poll(timeout=0)
    assert file_reads == []
    await bus.close()
    again = InProcessBus(tmp_path / "bus.db")
    from_file = await again.consumer("g2", ["t"]).poll(timeout=0)
    assert sorted(polled, key=lambda r: (r.partition, r.offset)) == sorted(from_file, key=lambda r: (r.partition, r.offset))
    assert {r.value: r.headers for r in polled}[b"a"] == (("h", b"\x00\x01"),)
    await again.close()


async def test_records_of_another_bus_between_this_bus_s_sends_come_from_the_file(tmp_path, file_reads) -> None:
    path = tmp_path / "bus.db"
    mine, other = InProcessBus(path), InProcessBus(path)
    await mine.create_topics([TopicSpec("t", 1)])
    consumer = mine.consumer("g", ["t"])
    await mine.producer().send("t", b"mine 0")
    assert [r.value for r in await consumer.poll(timeout=0)] == [b"mine 0"]
    await other.producer().send("t", b"other 1")
    await mine.producer().send("t", b"mine 2")
    assert [(r.offset, r.value) for r in await consumer.poll(timeout=0)] == [(1, b"other 1"), (2, b"mine 2")]
    assert file_reads == [(TopicPartition("t", 0), 1)]
    await mine.close()
    await other.close()


def test_appends_of_two_stores_on_one_file_interleave_without_a_gap_or_a_clash(tmp_path) -> None:
    """A store keeps the ends of the partitions it wrote between its own appends: another connection's
    commit in between must make it read them again."""
    path = tmp_path / "bus.db"
    first, second = BusStore(path), BusStore(path)
    first.create_topics([TopicSpec("t", 2)])
    tp, other = TopicPartition("t", 0), TopicPartition("t", 1)
    try:
        offsets = [first.append([(tp, None, b"a", ()), (other, None, b"x", ())], 1),
                   second.append([(tp, None, b"b", ())], 1),
                   first.append([(tp, None, b"c", ())], 1),
                   first.append([(tp, None, b"d", ()), (tp, None, b"e", ())], 1),
                   second.append([(other, None, b"y", ()), (tp, None, b"f", ())], 1),
                   first.append([(tp, None, b"g", ()), (other, None, b"z", ())], 1)]
        assert offsets == [[0, 0], [1], [2], [3, 4], [1, 5], [6, 2]]
        assert [r.value for r in first.read(tp, 0, 100)] == [b"a", b"b", b"c", b"d", b"e", b"f", b"g"]
        assert [r.value for r in second.read(other, 0, 100)] == [b"x", b"y", b"z"]
    finally:
        first.close()
        second.close()


def test_a_failed_append_leaves_the_next_one_reading_the_ends_from_the_file(tmp_path) -> None:
    store = BusStore(tmp_path / "bus.db")
    store.create_topics([TopicSpec("t", 1)])
    tp = TopicPartition("t", 0)
    try:
        assert store.append([(tp, None, b"a", ())], 1) == [0]
        with pytest.raises(sqlite3.ProgrammingError):
            store.append([(tp, None, b"b", ()), (tp, None, object(), ())], 1)  # no row of it is written
        assert store.append([(tp, None, b"c", ())], 1) == [1]
        assert [r.value for r in store.read(tp, 0, 10)] == [b"a", b"c"]
    finally:
        store.close()
