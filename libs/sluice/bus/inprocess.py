"""The in-process adapter of the bus port (embedded mode), keeping Kafka's semantics.

Records, topics and committed group offsets live in SQLite: an in-memory database when no path
is given, or a WAL-mode file, so a restarted embedded process (same path) finds every record and
every committed offset again, and several processes on one file see each other's records
(a waiting poll re-reads the file every `poll_interval`; sends in this process wake it at once).

Decisions:
- Compacted topics are not compacted. A reader from the beginning sees every value in offset
  order, so the latest value per key is the last one it sees -- all that compaction promises --
  and offsets stay contiguous.
- Group membership lives in this InProcessBus object: joining or closing a member rebalances
  its group at once with Kafka's range assignor. Committed offsets live in the store, so every
  instance on one file shares them, but two instances do not split one group's partitions.
- After a rebalance a retained partition keeps its position; a newly assigned one starts at the
  group's committed offset (0 when none), so records the previous owner polled but did not
  commit are delivered again (at-least-once).
- The file uses synchronous=FULL (sluice.sqlite_wal): a send or an offset commit is on disk when it
  returns, so it survives a power loss as the event log's commits do, and neither file can keep
  a later write of the pair (an offset, a relay's saved position) while losing the earlier one.
  Sends are group-committed off the event loop (`sluice.bus.inprocess_writer`), offset commits
  written off it too; reads use a connection of their own, so they never wait for an fsync.
- Wake-ups use asyncio.Event: one bus serves one event loop. SQLite access holds a lock.
- A poll reads only the partitions whose end, as this bus knows it (`EndOffsets`), is beyond
  the position: this bus's sends raise the ends at once; other processes' appends are seen when
  the ends are read from the file again (when another connection committed, checked at least
  every poll_interval and whenever a poll's wait ran out without a send).
"""
from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections.abc import Mapping, Sequence

from sluice.bus.inprocess_recent import RecentRecords
from sluice.bus.inprocess_store import BusStore, EndOffsets, Headers
from sluice.bus.inprocess_writer import GroupCommit, Row
from sluice.bus.port import CommitFailed, Message, Record, TopicPartition, TopicSpec, UnknownTopic, kafka_partition
from sluice.clock import Clock
from sluice.waiting import wait_set

__all__ = ["InProcessBus", "InProcessConsumer", "InProcessProducer", "range_assignment"]

def range_assignment(
    subscriptions: Mapping[str, Sequence[str]], partitions: Mapping[str, int]
) -> dict[str, set[TopicPartition]]:
    """Kafka's range assignor: per topic, its sorted partitions are split into contiguous ranges
    among the sorted ids of the members subscribed to it; the first members get one extra."""
    plan: dict[str, set[TopicPartition]] = {member: set() for member in subscriptions}
    for topic in sorted({t for topics in subscriptions.values() for t in topics}):
        members = sorted(m for m, topics in subscriptions.items() if topic in topics)
        per_member, extra = divmod(partitions.get(topic, 0), len(members))
        start = 0
        for i, member in enumerate(members):
            count = per_member + (1 if i < extra else 0)
            plan[member].update(TopicPartition(topic, p) for p in range(start, start + count))
            start += count
    return plan


class InProcessBus:
    """The Bus port inside one process; see the module docstring for the decisions it makes."""

    def __init__(
        self, path: str | os.PathLike | None = None, *, poll_interval: float = 0.05, clock: Clock | None = None
    ) -> None:
        self._store = BusStore(path)
        self.poll_interval = poll_interval
        self._ends = EndOffsets(self._store, poll_interval)
        self._writer = GroupCommit(self._store, self._timestamp_ms, self._appended)
        self._recent = RecentRecords()
        self._clock = clock
        self._topics: dict[str, TopicSpec] = {}
        self._groups: dict[str, dict[str, InProcessConsumer]] = {}
        self._missing: dict[str, set[str]] = {}  # group -> subscribed topics unknown at its last rebalance
        self._producers: list[InProcessProducer] = []
        self._member_ids = itertools.count()
        self._closed = False

    async def create_topics(self, topics: Sequence[TopicSpec]) -> None:
        self._check_open()
        self._store.create_topics(topics)
        for group_id in list(self._groups):  # subscribers of a new topic get its partitions
            self._rebalance(group_id)

    def producer(self) -> InProcessProducer:
        self._check_open()
        producer = InProcessProducer(self)
        self._producers.append(producer)
        return producer

    def consumer(self, group_id: str, topics: Sequence[str]) -> InProcessConsumer:
        self._check_open()
        member_id = f"{group_id}-{next(self._member_ids):08d}"  # sorts in join order
        member = InProcessConsumer(self, group_id, member_id, tuple(topics))
        self._groups.setdefault(group_id, {})[member_id] = member
        self._rebalance(group_id)
        return member

    async def close(self) -> None:
        if self._closed:
            return
        for producer in self._producers:
            await producer.close()
        for members in list(self._groups.values()):
            for member in list(members.values()):
                await member.close()
        self._closed = True
        await self._writer.settle()
        self._store.close()

    # -- used by the producer and consumers -------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the bus is closed")

    def _partitions(self, topic: str) -> int:
        spec = self._topics.get(topic) or self._store.topic(topic)
        if spec is None:
            raise UnknownTopic(f"topic {topic!r} does not exist; create it with create_topics first")
        self._topics[topic] = spec
        return spec.partitions

    async def _append(self, rows: Sequence[Row]) -> list[int]:
        self._check_open()
        return await self._writer.append(rows)

    def _appended(self, rows: Sequence[Row], offsets: list[int], timestamp_ms: int) -> None:
        ends: dict[TopicPartition, int] = {}
        records = []
        for (tp, key, value, headers), offset in zip(rows, offsets):
            ends[tp] = offset + 1  # offsets rise within a partition
            records.append(Record(tp.topic, tp.partition, offset, key, value, headers, timestamp_ms))
        self._recent.add(records)
        self._ends.raise_to(ends)
        topics = {tp.topic for tp, _, _, _ in rows}
        for members in self._groups.values():
            for member in members.values():
                if not topics.isdisjoint(member.topics):
                    member._wake.set()

    def _read(self, tp: TopicPartition, start: int, limit: int) -> list[Record]:
        """Records of `tp` from offset `start` on: from memory if this bus appended them lately, else from the file."""
        return self._recent.read(tp, start, limit) or self._store.read(tp, start, limit)

    def _timestamp_ms(self) -> int:
        if self._clock is None:
            return time.time_ns() // 1_000_000
        return int(self._clock.now().timestamp() * 1000)

    def _leave(self, member: InProcessConsumer) -> None:
        self._groups.get(member.group_id, {}).pop(member.member_id, None)
        self._rebalance(member.group_id)

    def _rebalance(self, group_id: str) -> None:
        members = self._groups.get(group_id, {})
        counts = {t: self._partition_count(t) for m in members.values() for t in m.topics}
        self._missing[group_id] = {t for t, n in counts.items() if n == 0}
        self._ends.track({t: n for t, n in counts.items() if n > 0})
        plan = range_assignment({member_id: m.topics for member_id, m in members.items()}, counts)
        for member_id, member in members.items():
            member._assign(plan[member_id])

    def _discover_topics(self, member: InProcessConsumer) -> None:
        """A subscribed topic that another process created in the file joins the assignment."""
        if any(self._store.topic(t) for t in self._missing.get(member.group_id, ())):
            self._rebalance(member.group_id)

    def _partition_count(self, topic: str) -> int:
        try:
            return self._partitions(topic)
        except UnknownTopic:
            return 0  # subscribed before creation: assigned once create_topics makes it


class InProcessProducer:
    def __init__(self, bus: InProcessBus) -> None:
        self._bus = bus
        self._next_partition: dict[str, int] = {}
        self._partitions: dict[tuple[str, int], TopicPartition] = {}  # made once each, not per record
        self._closed = False

    async def send(
        self, topic: str, value: bytes, *, key: bytes | None = None, headers: Sequence[tuple[str, bytes]] = ()
    ) -> tuple[int, int]:
        return (await self._send([(self._partition(topic, key), key, value, _as_stored(headers))]))[0]

    async def send_batch(self, messages: Sequence[Message]) -> list[tuple[int, int]]:
        return await self._send([(self._partition(m.topic, m.key), m.key, m.value, _as_stored(m.headers))
                                 for m in messages])

    async def _send(self, rows: list[Row]) -> list[tuple[int, int]]:
        if self._closed:
            raise RuntimeError("the producer is closed")
        if not rows:
            return []
        offsets = await self._bus._append(rows)
        return [(tp.partition, offset) for (tp, _, _, _), offset in zip(rows, offsets)]

    def _partition(self, topic: str, key: bytes | None) -> TopicPartition:
        partitions = self._bus._partitions(topic)
        if key is not None:
            partition = kafka_partition(key, partitions)
        else:
            partition = self._next_partition.get(topic, 0) % partitions  # round robin, per producer and topic
            self._next_partition[topic] = partition + 1
        tp = self._partitions.get((topic, partition))
        if tp is None:
            tp = self._partitions[topic, partition] = TopicPartition(topic, partition)
        return tp

    async def close(self) -> None:
        self._closed = True


def _as_stored(headers: Sequence[tuple[str, bytes]]) -> Headers:
    """A record's headers as a consumer gets them back: a tuple of (name, bytes) pairs."""
    if not headers:
        return ()
    return tuple([(name, value if type(value) is bytes else bytes(value)) for name, value in headers])


class InProcessConsumer:
    """One member of a consumer group; the bus assigns its partitions."""

    def __init__(self, bus: InProcessBus, group_id: str, member_id: str, topics: tuple[str, ...]) -> None:
        self._bus = bus
        self.group_id = group_id
        self.member_id = member_id
        self.topics = topics
        self._positions: dict[TopicPartition, int] = {}  # assigned partition -> next offset to read
        self._wake = asyncio.Event()
        self._rotation = 0
        self._closed = False

    def assignment(self) -> set[TopicPartition]:
        return set(self._positions)

    def lag(self) -> dict[TopicPartition, int]:
        """Records after this consumer's position in each assigned partition, as far as the bus knows its end."""
        ends = self._bus._ends
        return {tp: max(0, ends.end(tp) - position) for tp, position in self._positions.items()}

    async def poll(self, timeout: float = 1.0, max_records: int = 500) -> list[Record]:
        if self._closed:
            raise RuntimeError(f"consumer {self.member_id} is closed")
        deadline = time.monotonic() + timeout
        waited_out = False
        while True:
            self._wake.clear()  # before reading, so a send after the read still wakes the wait
            self._bus._discover_topics(self)
            self._bus._ends.refresh(force=waited_out)  # other processes' appends, see EndOffsets
            records = self._fetch(max_records)
            remaining = deadline - time.monotonic()
            if records or self._closed or remaining <= 0:
                return records
            # a send in this bus sets the event; other processes are seen at the next refresh
            waited_out = not await wait_set(self._wake, min(remaining, self._bus.poll_interval))

    async def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        if self._closed:
            raise CommitFailed(f"consumer {self.member_id} has left group {self.group_id!r}")
        offsets = dict(self._positions) if offsets is None else dict(offsets)
        foreign = sorted(set(offsets) - set(self._positions))
        if foreign:
            raise CommitFailed(
                f"member {self.member_id} of group {self.group_id!r} is not assigned {foreign}"
                f" (assigned: {sorted(self._positions)}); the group may have rebalanced"
            )
        if offsets:
            if self._bus._store.durable:  # a commit waits for an fsync: off the event loop
                await asyncio.to_thread(self._bus._store.commit, self.group_id, offsets)
            else:
                self._bus._store.commit(self.group_id, offsets)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._positions = {}
        self._wake.set()  # ends a poll in progress
        self._bus._leave(self)

    def _assign(self, partitions: set[TopicPartition]) -> None:
        old = self._positions
        self._positions = {
            tp: old[tp] if tp in old else (self._bus._store.committed(self.group_id, tp) or 0)
            for tp in sorted(partitions)
        }
        self._wake.set()

    def _fetch(self, max_records: int) -> list[Record]:
        """Up to max_records, taken in turn from each partition (offset order within one),
        starting from a different partition each time so none is starved. Only partitions whose
        known end is beyond the position are read: most polls find most partitions empty."""
        partitions = list(self._positions)
        if not partitions or max_records <= 0:
            return []
        start = self._rotation % len(partitions)
        self._rotation += 1
        ends = self._bus._ends
        partitions = [tp for tp in partitions[start:] + partitions[:start] if ends.end(tp) > self._positions[tp]]
        batches = [self._bus._read(tp, self._positions[tp], max_records) for tp in partitions]
        if len(batches) == 1:
            records = batches[0][:max_records]
        else:
            interleaved = itertools.chain.from_iterable(itertools.zip_longest(*batches))
            records = [r for r in interleaved if r is not None][:max_records]
        taken = {(record.topic, record.partition): record.offset for record in records}  # the last of each
        for tp in partitions:
            if (last := taken.get((tp.topic, tp.partition))) is not None:
                self._positions[tp] = last + 1
        ends.raise_to({tp: batch[-1].offset + 1 for tp, batch in zip(partitions, batches) if batch})
        return records
