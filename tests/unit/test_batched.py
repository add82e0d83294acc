"""Batch records (sluice.eventlog.batched): many streams' events in one record, given back as they were."""
from __future__ import annotations

import json
from datetime import datetime, timezone

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.eventlog.batched import BATCH_TYPE, MalformedBatch, batch, batches, expand
from sluice.eventlog.port import NewEvent, RecordedEvent

AT = datetime(2026, 11, 27, tzinfo=timezone.utc)


def recorded(event: NewEvent, position: int = 7, stream: str = "matcher-partition-1") -> RecordedEvent:
    return RecordedEvent(event.id, stream, 3, position, event.type, event.data, dict(event.metadata), AT)


def test_each_event_comes_back_under_its_own_stream_and_version_at_the_batch_position():
    events = [("matcher-a", 0, "JobCreated", b'{"job_id":"j1"}'),
              ("matcher-b", 4, "JobTriggered", b'{"job":{"id":"j2"}}'),
              ("matcher-a", 1, "JobDiscarded", b'{"reason":"gone"}')]
    record = batch("b-1", events)
    assert record.type == BATCH_TYPE and record.id == "b-1" and not record.metadata

    expanded = expand(recorded(record))

    assert [(e.id, e.stream, e.version, e.type, e.data, e.position, e.recorded_at, e.metadata) for e in expanded] == [
        (f"b-1/{n}", stream, version, type_, data, 7, AT, {}) for n, (stream, version, type_, data) in enumerate(events)]


def test_only_the_events_of_the_types_asked_for():
    record = recorded(batch("b-1", [("s-a", 0, "JobCreated", b"{}"), ("s-b", 0, "JobTriggered", b'{"j":1}'),
                                    ("s-a", 1, "JobTriggered", b'{"j":2}')]))
    assert [(e.id, e.stream, e.data) for e in expand(record, {"JobTriggered"})] == [
        ("b-1/1", "s-b", b'{"j":1}'), ("b-1/2", "s-a", b'{"j":2}')]


def test_a_batch_is_one_json_document_of_its_events_and_their_index():
    record = batch("b-1", [("matcher-a", 0, "JobCreated", b'{"job_id":"j1"}'),
                           ("matcher-b", 2, "JobDiscarded", b'{"reason":"r"}')])
    document = json.loads(record.data)
    assert document["events"] == [{"job_id": "j1"}, {"reason": "r"}]
    assert [entry[:3] for entry in document["index"]] == [["matcher-a", 0, "JobCreated"], ["matcher-b", 2, "JobDiscarded"]]


json_values = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.text(),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
                           max_leaves=12)


@given(st.lists(st.tuples(st.text(min_size=1), st.integers(0, 2**31), st.text(min_size=1), json_values), max_size=20))
def test_any_events_come_back_byte_for_byte(entries):
    """Whatever the events' text holds (quotes, newlines, the index's own marker), nothing is parsed
    but the index."""
    events = [(stream, version, type_, orjson.dumps({"value": value, "marker": '],"index":'}))
              for stream, version, type_, value in entries]
    expanded = expand(recorded(batch("b", events)))
    assert [(e.stream, e.version, e.type, e.data) for e in expanded] == events


def test_a_record_of_another_type_is_itself():
    record = recorded(NewEvent("x", "JobTriggered", b"{}"))
    assert expand(record) == [record]


@pytest.mark.parametrize("data", [b"", b"{}", b'{"events":[{}],"index":{}}', b'{"events":[],"index":[["s"]]}',
                                  b'{"events":[],"index":[1,2}', b'\xff'])
def test_a_malformed_batch_is_named_not_a_crash(data):
    with pytest.raises(MalformedBatch, match="record b-9 of stream matcher-partition-1 at position 7"):
        expand(recorded(NewEvent("b-9", BATCH_TYPE, data)))


def test_events_are_cut_into_records_of_at_most_so_many_bytes_in_order():
    events = [("s", n, "T", b"x" * size) for n, size in enumerate([3, 4, 2, 9, 1, 1])]
    assert [[event[1] for event in run] for run in batches(events, 8)] == [[0, 1], [2], [3], [4, 5]]
    assert list(batches([], 8)) == []
