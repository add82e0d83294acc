"""The consumer loop carries on when a rebalance makes its offset commit fail: the records it handled
are read again by their partitions' new owner, whose handlers skip what the log recorded."""
from __future__ import annotations

from sluice.bus.port import CommitFailed, Record
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
