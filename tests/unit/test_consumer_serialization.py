"""A consumer's state as JSON and as compact bytes: exact round trips, clear errors for damage."""
from __future__ import annotations

import json
import zlib
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.domain.consumer import (
    Consume,
    ConsumerConfig,
    ConsumerStateError,
    PartitionId,
    decide,
    fold,
    state_from_bytes,
    state_from_json,
    state_to_bytes,
    state_to_json,
)
from sluice.domain.consumer.serialization import MAGIC
from sluice.domain.datasets import KeyCondition, MetadataCondition, PartitionFilter
from tests.unit.test_consumer import SPEC, T0, Index, consumer, partition


def busy_state(partitions: int = 50, config: ConsumerConfig | None = None):
    index = Index()
    late = index.begin()
    for hour in range(partitions):
        index.add(partition("US", hour, quality="ok"), at=T0 + timedelta(minutes=hour))
    config = config or ConsumerConfig(where=PartitionFilter((KeyCondition("hour", lower="0", upper="99"),),
                                                            (MetadataCondition("quality", ("ok",)),)),
                                      start=T0, end=T0 + timedelta(days=1))
    state = fold(consumer(config), decide(consumer(config), Consume("run-1", 5), T0, SPEC, index.view()))
    return state, late


def test_round_trips_through_json_and_bytes():
    state, late = busy_state()
    assert state.in_flight == (late,) and len(state.working_set) == 50
    assert state_from_json(json.loads(json.dumps(state_to_json(state)))) == state
    assert state_from_bytes(state_to_bytes(state)) == state


def test_bytes_are_much_smaller_than_the_readable_json():
    state, _ = busy_state(500, ConsumerConfig(max_working_set=1000))
    readable = json.dumps(state_to_json(state), indent=2).encode()
    assert len(state_to_bytes(state)) * 8 < len(readable)


@settings(max_examples=100)
@given(st.integers(0, 30), st.integers(1, 10), st.integers(0, 3))
def test_any_reachable_state_round_trips(partitions, limit, retries):
    index = Index()
    for hour in range(partitions):
        if hour % 4 == 3:
            index.begin()
        else:
            index.add(partition("JP", hour), at=T0 + timedelta(seconds=hour))
    state = consumer(ConsumerConfig(max_retries=retries, max_working_set=8))
    state = fold(state, decide(state, Consume("r", limit), T0, SPEC, index.view()))
    assert state_from_bytes(state_to_bytes(state)) == state


@pytest.mark.parametrize("damage, words", [
    (lambda data: b"", "bad magic"),
    (lambda data: b"NOPE" + data[4:], "bad magic"),
    (lambda data: data[:5], "corrupt"),
    (lambda data: data[:-7], "corrupt"),
    (lambda data: data[:40] + bytes([data[40] ^ 0xFF]) + data[41:], "corrupt"),
    (lambda data: data[:4] + b"\x09" + data[5:], "format version 9"),
    (lambda data: MAGIC + b"\x01" + zlib.compress(b"[1, 2]"), "document: must be an object"),
    (lambda data: MAGIC + b"\x01" + zlib.compress(b"{not json"), "corrupt"),
])
def test_damaged_bytes_are_a_clear_error(damage, words):
    state, _ = busy_state()
    with pytest.raises(ConsumerStateError, match=words):
        state_from_bytes(damage(state_to_bytes(state)))


@pytest.mark.parametrize("path, value, words", [
    (("high_water_mark",), "7", "high_water_mark: must be a whole number"),
    (("in_flight",), [5, 3], "in_flight: must be ascending"),
    (("in_flight",), [10_000], "below high_water_mark"),
    (("working_set", 0, "status"), "DONE", "working_set[0].status: 'DONE' is not one of AVAILABLE, IN_PROGRESS"),
    (("working_set", 0, "id"), "x", "working_set[0].id: not a POSITION.INDEX id"),
    (("working_set", 0, "committed_at"), "yesterday", "working_set[0].committed_at: not a time"),
    (("working_set", 0, "taken_at"), None, "working_set[0].taken_at: set exactly when"),
    (("config", "max_retries"), None, "config.max_retries: must be a whole number"),
    (("format",), "other", "format: expected"),
])
def test_a_damaged_json_document_names_the_field(path, value, words):
    state, _ = busy_state()
    document = state_to_json(state)
    assert any(item["status"] == "IN_PROGRESS" for item in document["working_set"][:10])
    target = document
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    with pytest.raises(ConsumerStateError) as error:
        state_from_json(document)
    assert words in str(error.value)


def test_a_partition_id_listed_twice_is_refused():
    state, _ = busy_state()
    document = state_to_json(state)
    document["working_set"].append(document["working_set"][0])
    with pytest.raises(ConsumerStateError, match="listed twice"):
        state_from_json(document)


def test_the_json_is_readable():
    state, late = busy_state(3)
    document = state_to_json(state)
    assert document["high_water_mark"] == 4 and document["in_flight"] == [late]
    item = document["working_set"][0]
    assert item["id"] == str(PartitionId(1, 0)) and item["key"] == {"marketplace": "US", "hour": "0"}
    assert item["status"] == "IN_PROGRESS" and item["taken_by"] == "run-1"
