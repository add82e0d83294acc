"""The consumer loop carries on when a rebalance makes its offset commit fail: the records it handled
are read again by their partitions' new owner, whose handlers skip what the log recorded."""
from __future__ import annotations

import asyncio

from sluice.bus.port import CommitFailed, Record, TopicPartition
from sluice.runtime.consumer import ConsumerLoop, Subscription


class RebalancedConsumer:
    """Hands out its records once; every commit fails as after a rebalance."""

    def __init__(self, records: list[Record]) -> None:
        self._records = records
        self.commits = 0

    async def poll(self, timeout: float = 1.0, max_records: int = 500) -> list[Record]:
        records, self._records = self._records, []
        return records

    async def commit(self, offsets=None) -> None:
        self.commits += 1
        raise CommitFailed("group 'g' rebalanced: partition 0 is assigned to another member")

    def assignment(self) -> set:
        return set()

    async def close(self) -> None:
        pass


class NoDeadLetters:
    async def send(self, topic, value, key=None, headers=()) -> None:
        raise AssertionError(f"nothing is dead-lettered here, got {value!r}")

    async def close(self) -> None:
        pass


async def test_a_commit_failed_by_a_rebalance_does_not_stop_the_loop(caplog):
    handled = []

    async def handle(record: Record) -> None:
        handled.append(record.value)

    records = [Record("t", 0, offset, b"k", f"v{offset}".encode(), (), 0) for offset in range(3)]
    consumer = RebalancedConsumer(records)
    loop = ConsumerLoop(consumer, Subscription("g", {"t": handle}), NoDeadLetters())
    assert await loop.step(0) == 3
    assert await loop.step(0) == 0
    assert handled == [b"v0", b"v1", b"v2"] and consumer.commits == 1
    assert "new owner reads these records again" in caplog.text


class SlowCommitConsumer:
    """Hands out one poll of records per call; each commit waits until the test lets it finish."""

    def __init__(self, polls: list[list[Record]]) -> None:
        self._polls = polls
        self.committed: list[dict] = []
        self.finish_commit = asyncio.Event()

    async def poll(self, timeout: float = 1.0, max_records: int = 500) -> list[Record]:
        return self._polls.pop(0) if self._polls else []

    async def commit(self, offsets=None) -> None:
        await self.finish_commit.wait()
        self.committed.append(dict(offsets))

    def assignment(self) -> set:
        return set()

    async def close(self) -> None:
        pass


async def test_overlapped_commits_let_the_next_poll_be_handled_and_commit_what_was_handled_in_order():
    handled = []

    async def handle(record: Record) -> None:
        handled.append((record.topic, record.partition, record.offset))

    first = [Record("t", 0, 5, b"k", b"a", (), 0), Record("t", 1, 2, b"k", b"b", (), 0),
             Record("t", 0, 6, b"k", b"c", (), 0)]
    second = [Record("t", 1, 3, b"k", b"d", (), 0)]
    consumer = SlowCommitConsumer([first, second])
    loop = ConsumerLoop(consumer, Subscription("g", {"t": handle}), NoDeadLetters(), overlap_commits=True)

    assert await loop.step(0) == 3
    await asyncio.sleep(0)
    assert consumer.committed == []  # the first poll's commit is under way...
    second_step = asyncio.ensure_future(loop.step(0))
    await asyncio.sleep(0)
    assert handled[-1] == ("t", 1, 3)  # ...while the next poll is handled
    assert not second_step.done()  # its own commit waits for the first one
    consumer.finish_commit.set()
    assert await second_step == 1
    await loop.settle()
    assert consumer.committed == [{TopicPartition("t", 0): 7, TopicPartition("t", 1): 3},
                                  {TopicPartition("t", 1): 4}]


async def test_an_overlapped_commit_failed_by_a_rebalance_is_logged_and_the_loop_goes_on(caplog):
    async def handle(record: Record) -> None:
        pass

    consumer = RebalancedConsumer([Record("t", 0, 0, b"k", b"v", (), 0)])
    loop = ConsumerLoop(consumer, Subscription("g", {"t": handle}), NoDeadLetters(), overlap_commits=True)
    assert await loop.step(0) == 1
    await loop.settle()
    assert await loop.step(0) == 0
    assert consumer.commits == 1 and "new owner reads these records again" in caplog.text
