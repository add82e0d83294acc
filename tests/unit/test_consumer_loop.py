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

    def __init__(self, polls: list[list[Record]], assigned: set[TopicPartition]) -> None:
        self._polls = polls
        self.assigned = assigned
        self.committed: list[dict] = []
        self.finish_commit = asyncio.Event()

    async def poll(self, timeout: float = 1.0, max_records: int = 500) -> list[Record]:
        return self._polls.pop(0) if self._polls else []

    async def commit(self, offsets=None) -> None:
        await self.finish_commit.wait()
        self.committed.append(dict(offsets))

    def assignment(self) -> set:
        return self.assigned

    async def close(self) -> None:
        pass


def record(partition: int, offset: int) -> Record:
    return Record("t", partition, offset, b"k", b"v", (), 0)


P0, P1, P2 = (TopicPartition("t", partition) for partition in range(3))


async def ignore(record: Record) -> None:
    pass


async def test_commits_run_while_the_next_polls_are_handled_at_most_once_per_interval_and_in_order():
    handled = []

    async def handle(record: Record) -> None:
        handled.append((record.partition, record.offset))

    polls = [[record(0, 5), record(1, 2), record(0, 6)], [record(1, 3)], [record(0, 7)], []]
    consumer = SlowCommitConsumer(polls, {P0, P1})
    now = [100.0]
    loop = ConsumerLoop(consumer, Subscription("g", {"t": handle}), NoDeadLetters(), commit_every=1.0,
                        monotonic=lambda: now[0])

    assert await loop.step(0) == 3  # the first commit starts at once...
    await asyncio.sleep(0)
    assert consumer.committed == []
    assert await loop.step(0) == 1  # ...and the next poll is handled while it is under way
    now[0] += 0.5
    assert await loop.step(0) == 1  # within the interval: no second commit yet
    assert handled == [(0, 5), (1, 2), (0, 6), (1, 3), (0, 7)]
    now[0] += 0.5
    second = asyncio.ensure_future(loop.step(0))  # nothing polled, the interval passed: commit what was handled
    await asyncio.sleep(0)
    assert not second.done()  # after the commit under way
    consumer.finish_commit.set()
    assert await second == 0
    await loop.settle()
    assert consumer.committed == [{P0: 7, P1: 3}, {P0: 8, P1: 4}]


async def test_settle_commits_what_was_handled_but_not_for_partitions_the_group_moved_away():
    consumer = SlowCommitConsumer([[record(0, 1)], [record(1, 4), record(2, 9)]], {P0, P1, P2})
    consumer.finish_commit.set()
    loop = ConsumerLoop(consumer, Subscription("g", {"t": ignore}), NoDeadLetters(), commit_every=60.0,
                        monotonic=lambda: 0.0)
    await loop.step(0)
    await loop.step(0)
    consumer.assigned = {P0, P1}  # a rebalance took partition 2 away
    await loop.settle()
    assert consumer.committed == [{P0: 2}, {P1: 5}]


async def test_a_background_commit_failed_by_a_rebalance_is_logged_and_the_loop_goes_on(caplog):
    consumer = RebalancedConsumer([record(0, 0)])
    consumer.assignment = lambda: {P0}
    loop = ConsumerLoop(consumer, Subscription("g", {"t": ignore}), NoDeadLetters(), commit_every=0.0)
    assert await loop.step(0) == 1
    await loop.settle()
    assert await loop.step(0) == 0
    assert consumer.commits == 1 and "new owner reads these records again" in caplog.text


class OnePollConsumer(SlowCommitConsumer):
    """One poll of records; commits at once, noting whether the log had made the poll's appends durable."""

    def __init__(self, polls: list[list[Record]], log) -> None:
        super().__init__(polls, {TopicPartition("t", 0)})
        self._log = log
        self.durable_at_commit: list[bool] = []
        self.finish_commit.set()

    async def commit(self, offsets=None) -> None:
        self.durable_at_commit.append(self._log.commits_held_back == 0)
        await super().commit(offsets or {})


async def test_a_subscription_that_asks_for_it_appends_without_waiting_and_commits_once_durable(tmp_path):
    from sluice.eventlog.deferred import current
    from sluice.eventlog.port import ANY_VERSION, NewEvent
    from sluice.eventlog.sqlite import SqliteEventLog
    from sluice.runtime.consumer import BatchHandler

    log = SqliteEventLog(tmp_path / "events.db")
    deferred_in_handler = []

    async def apply(items) -> None:
        deferred_in_handler.append(current() is not None)
        log.append("s", [NewEvent(f"e{len(deferred_in_handler)}-{record.offset}", "Handled", b"{}")
                         for record, _ in items], ANY_VERSION)

    handlers = {"t": BatchHandler(lambda record: record, apply)}
    for deferred in (True, False):
        consumer = OnePollConsumer([[record(0, 0), record(0, 1)]], log)
        loop = ConsumerLoop(consumer, Subscription("g", handlers, deferred_durability=deferred), NoDeadLetters())
        syncs = log.durability_flushes
        assert await loop.step(0) == 2
        assert deferred_in_handler[-1] is deferred and consumer.durable_at_commit == [True]
        assert log.durability_flushes == syncs + deferred  # the loop's own fsync, else the commit's
    log.close()
