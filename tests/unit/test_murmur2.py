"""Keys land where Kafka puts them: Sluice's murmur2 is the Java client's, as aiokafka's default
partitioner computes it, for any bytes (partitions are chosen by it in the in-process bus and the
producers alike)."""
from __future__ import annotations

from aiokafka.partitioner import murmur2 as aiokafka_murmur2
from hypothesis import given
from hypothesis import strategies as st

from sluice.bus.port import _partition, murmur2


@given(st.binary(max_size=300))
def test_murmur2_is_kafka_s(key):
    assert murmur2(key) == aiokafka_murmur2(key)


def test_known_keys():
    assert murmur2(b"hello") == 2132663229
    assert [_partition(key, 4) for key in (b"", b"a", b"ab", b"abc", b"abcd", b"abcde")] == [
        (aiokafka_murmur2(key) & 0x7FFFFFFF) % 4 for key in (b"", b"a", b"ab", b"abc", b"abcd", b"abcde")]
