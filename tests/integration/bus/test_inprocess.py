"""The in-process bus: the bus contract in memory and on SQLite, plus what only it promises."""
from __future__ import annotations

import asyncio
import sqlite3
import time
from datetime import datetime, timezone

from sluice.bus import TopicPartition, TopicSpec
from sluice.bus.inprocess import InProcessBus, range_assignment
from sluice.bus.inprocess_store import BusStore
from sluice.clock import SimulatedClock
from tests.integration.bus.contract import BusContract, DurableBusContract


class TestInProcessBusMemory(BusContract):
    async def make_bus(self, tmp_path) -> InProcessBus:
        return InProcessBus()


class TestInProcessBusSqlite(DurableBusContract):
    async def make_bus(self, tmp_path) -> InProcessBus:
        return InProcessBus(tmp_path / "bus.db")

    async def reopen(self, bus, tmp_path) -> InProcessBus:
        return InProcessBus(tmp_path / "bus.db")


def test_range_assignment_matches_kafka() -> None:
    plan = range_assignment({"m-2": ["t", "u"], "m-1": ["t"], "m-3": ["t", "u"]}, {"t": 7, "u": 3})
    parts = {m: sorted((tp.topic, tp.partition) for tp in tps) for m, tps in plan.items()}
    assert parts == {
        "m-1": [("t", 0), ("t", 1), ("t", 2)],
        "m-2": [("t", 3), ("t", 4), ("u", 0), ("u", 1)],
        "m-3": [("t", 5), ("t", 6), ("u", 2)],
    }


async def test_keyless_records_go_round_robin() -> None:
    bus = InProcessBus()
    await bus.create_topics([TopicSpec("t", 4)])
    producer = bus.producer()
    assert [(await producer.send("t", b"v"))[0] for _ in range(8)] == [0, 1, 2, 3, 0, 1, 2, 3]
    await bus.close()


async def test_timestamps_come_from_the_given_clock() -> None:
    clock = SimulatedClock(datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc))
    bus = InProcessBus(clock=clock)
    await bus.create_topics([TopicSpec("t")])
    await bus.producer().send("t", b"v")
    (record,) = await bus.consumer("g", ["t"]).poll(timeout=0)
    assert record.timestamp_ms == int(clock.now().timestamp() * 1000)
    await bus.close()


async def test_send_wakes_a_waiting_poll_without_waiting_for_the_poll_interval(tmp_path) -> None:
    bus = InProcessBus(tmp_path / "bus.db", poll_interval=30)
    await bus.create_topics([TopicSpec("t")])
    waiting = asyncio.create_task(bus.consumer("g", ["t"]).poll(timeout=30))
    await asyncio.sleep(0.05)
    await bus.producer().send("t", b"v")
    started = time.monotonic()
    assert [r.value for r in await asyncio.wait_for(waiting, 5)] == [b"v"]
    assert time.monotonic() - started < 0.5
    await bus.close()


async def test_a_subscriber_gets_partitions_of_a_topic_created_later() -> None:
    bus = InProcessBus()
    consumer = bus.consumer("g", ["late"])
    assert consumer.assignment() == set()
    await bus.create_topics([TopicSpec("late", 2)])
    assert consumer.assignment() == {TopicPartition("late", 0), TopicPartition("late", 1)}
    await bus.close()


async def test_two_buses_on_one_file_see_each_others_records(tmp_path) -> None:
    path = tmp_path / "shared.db"
    first, second = InProcessBus(path, poll_interval=0.02), InProcessBus(path, poll_interval=0.02)
    late = second.consumer("g2", ["t"])  # subscribed before the other process creates the topic
    assert late.assignment() == set()
    await first.create_topics([TopicSpec("t", 1)])
    on_second = second.consumer("g2b", ["t"])  # the topic reaches `second` through the file
    assert on_second.assignment() == {TopicPartition("t", 0)}
    assert await late.poll(timeout=0) == [] and late.assignment() == {TopicPartition("t", 0)}

    waiting = asyncio.create_task(on_second.poll(timeout=5))
    await asyncio.sleep(0.05)
    await first.producer().send("t", b"from first")
    started = time.monotonic()
    assert [r.value for r in await waiting] == [b"from first"]
    assert time.monotonic() - started < 1.0

    producers = [first.producer(), second.producer()]
    sent = [await producers[i % 2].send("t", f"m{i}".encode()) for i in range(6)]
    assert sent == [(0, offset) for offset in range(1, 7)]  # one contiguous log for both writers
    on_first = first.consumer("g1", ["t"])
    assert [r.value for r in await on_first.poll(timeout=1)] == [b"from first"] + [f"m{i}".encode() for i in range(6)]
    await on_first.commit()
    await first.close()
    await second.close()


async def test_sends_made_during_a_commit_go_to_the_file_together_in_send_order(tmp_path, monkeypatch) -> None:
    """Group commit: each send returns its own offsets once they are durable, fewer commits than sends."""
    bus = InProcessBus(tmp_path / "bus.db")
    await bus.create_topics([TopicSpec("t")])
    commits: list[int] = []
    original = BusStore.append

    def counted(store: BusStore, rows, timestamp_ms: int) -> list[int]:
        commits.append(len(rows))
        return original(store, rows, timestamp_ms)

    monkeypatch.setattr(BusStore, "append", counted)
    producer = bus.producer()
    sent = await asyncio.gather(*(producer.send("t", str(n).encode()) for n in range(50)))
    assert sent == [(0, n) for n in range(50)]
    assert sum(commits) == 50 and len(commits) < 50
    reopened = InProcessBus(tmp_path / "bus.db")
    records = await reopened.consumer("g", ["t"]).poll(timeout=0, max_records=100)
    assert [(r.offset, r.value) for r in records] == [(n, str(n).encode()) for n in range(50)]
    await reopened.close()
    await bus.close()


async def test_a_failed_group_commit_fails_each_of_its_sends_and_the_next_sends_go_through(tmp_path, monkeypatch) -> None:
    bus = InProcessBus(tmp_path / "bus.db")
    await bus.create_topics([TopicSpec("t")])
    original = BusStore.append
    failing = [True]

    def disk_full_once(store: BusStore, rows, timestamp_ms: int) -> list[int]:
        if failing:
            failing.clear()
            raise sqlite3.OperationalError("database or disk is full")
        return original(store, rows, timestamp_ms)

    monkeypatch.setattr(BusStore, "append", disk_full_once)
    producer = bus.producer()
    outcomes = await asyncio.gather(*(producer.send("t", b"v") for _ in range(3)), return_exceptions=True)
    assert all(isinstance(outcome, sqlite3.OperationalError) for outcome in outcomes)
    assert await producer.send("t", b"w") == (0, 0)
    await bus.close()
