"""The bus port: Kafka's semantics (topics, keyed partitions, offsets, consumer groups).

Adapters: the in-process bus (embedded mode) and Kafka via aiokafka (distributed mode).
Both pass tests/integration/bus/contract.py.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import lru_cache
from typing import Mapping, Protocol, Sequence


class UnknownTopic(Exception):
    """Sending to a topic that was never created (Kafka's UnknownTopicOrPartitionError)."""


class CommitFailed(Exception):
    """Committing a partition this group member is not assigned, e.g. after a rebalance
    moved it to another member (Kafka's CommitFailedError)."""


@dataclass(frozen=True, order=True)
class TopicPartition:
    topic: str
    partition: int


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int

    def header(self, name: str) -> str:
        """The first header of that name as text (bytes that are not UTF-8 replaced), "" when there is none."""
        return next((value.decode("utf-8", errors="replace") for key, value in self.headers if key == name), "")


@dataclass(frozen=True)
class Message:
    """A record to send: what `Producer.send` takes, for `send_batch`."""

    topic: str
    value: bytes
    key: bytes | None = None
    headers: Sequence[tuple[str, bytes]] = ()


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int = 1
    compacted: bool = False          # keep only the latest value per key (tables such as schedule changes)


class Producer(Protocol):
    async def send(
        self, topic: str, value: bytes, *, key: bytes | None = None, headers: Sequence[tuple[str, bytes]] = ()
    ) -> tuple[int, int]:
        """Append one record; return (partition, offset) once it is durable on the bus.

        The partition is kafka_partition(key, n) for a key; keyless records are spread over the
        partitions. Raises UnknownTopic when `topic` was never created."""
        ...

    async def send_batch(self, messages: Sequence[Message]) -> list[tuple[int, int]]:
        """Append the records in order, `send`'s (partition, offset) of each, once all are durable:
        one round trip (Kafka) or one transaction (in-process), not one per record. Records of
        one partition keep their order; after a failure some of them may have been written."""
        ...

    async def close(self) -> None: ...


class Consumer(Protocol):
    async def poll(self, timeout: float = 1.0, max_records: int = 500) -> list[Record]:
        """Records from the assigned partitions after this consumer's position; [] after `timeout` seconds."""
        ...

    async def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Commit the next offset to read per partition (Kafka semantics); None commits what poll returned.

        Raises CommitFailed for a partition that is not in assignment()."""
        ...

    def assignment(self) -> set[TopicPartition]: ...

    async def close(self) -> None:
        """Leave the group; its partitions are reassigned to the remaining members."""
        ...


class Bus(Protocol):
    async def create_topics(self, topics: Sequence[TopicSpec]) -> None:
        """Create the topics that do not exist yet; existing ones are left as they are."""
        ...

    def producer(self) -> Producer: ...

    def consumer(self, group_id: str, topics: Sequence[str]) -> Consumer:
        """Join `group_id`; partitions are shared among the group's members. A group with no
        committed offset for a partition starts at its earliest record."""
        ...

    async def close(self) -> None: ...


CACHED_KEY_BYTES = 256
"""Longer keys are hashed each time: the cache keeps up to 65,536 keys alive, and huge keys (up to a
record's size) would hold gigabytes there."""


def kafka_partition(key: bytes, partitions: int) -> int:
    """Kafka's default partitioner (murmur2, positive, modulo), so keys land where Kafka puts them.
    Cached: murmur2 in Python costs microseconds, and the keys (schedule ids, datasets) recur."""
    if len(key) > CACHED_KEY_BYTES:
        return _partition(key, partitions)
    return _cached_partition(key, partitions)


def _partition(key: bytes, partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % partitions


_cached_partition = lru_cache(maxsize=65_536)(_partition)


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (the Java client's `Utils.murmur2`) of the key's bytes, its 4-byte words read
    little-endian at once (`struct`): indexing each byte cost most of its time."""
    length = len(data)
    m = 0x5BD1E995
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for k in _words(length // 4).unpack_from(data):
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        h = ((h * m) & 0xFFFFFFFF) ^ ((k * m) & 0xFFFFFFFF)
    extra = length % 4
    tail = length & ~3
    if extra >= 3:
        h ^= data[tail + 2] << 16
    if extra >= 2:
        h ^= data[tail + 1] << 8
    if extra >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


@lru_cache(maxsize=256)
def _words(count: int) -> struct.Struct:
    return struct.Struct(f"<{count}I")
