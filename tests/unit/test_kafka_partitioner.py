"""The Kafka producer's partitioner (sluice.bus.kafka._partition_of): where Kafka's own clients put a key."""
from __future__ import annotations

import random

import pytest
from aiokafka.partitioner import DefaultPartitioner

from sluice.bus.kafka import _partition_of

ALL = list(range(1000))


@pytest.mark.parametrize("key, partition", [
    (b"", 681), (b"a", 524), (b"ab", 434), (b"abc", 107), (b"123456789", 566), (b"\x00 ", 742),
])
def test_the_java_clients_partition(key: bytes, partition: int) -> None:
    # org.apache.kafka.clients.producer.internals.DefaultPartitioner over 1,000 partitions
    assert _partition_of(key, ALL, ALL) == partition


def test_aiokafkas_default_partition_for_any_key_and_count() -> None:
    rng, default = random.Random(7), DefaultPartitioner()
    for _ in range(2000):
        key = rng.randbytes(rng.randrange(0, 60))
        partitions = list(range(rng.randrange(1, 64)))
        assert _partition_of(key, partitions, partitions) == default(key, partitions, partitions)


def test_a_keyless_record_goes_to_an_available_partition() -> None:
    assert {_partition_of(None, [0, 1, 2, 3], [2]) for _ in range(20)} == {2}
    assert {_partition_of(None, [0, 1], []) for _ in range(50)} <= {0, 1}
