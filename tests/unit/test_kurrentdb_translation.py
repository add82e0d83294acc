"""The KurrentDB adapter's translation functions (sluice.eventlog.kurrentdb_codec): pure, no server."""
from __future__ import annotations

import json
import re
import uuid
from datetime import datetime, timezone
from itertools import count

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kurrentdbclient import RecordedEvent as KurrentRecordedEvent
from kurrentdbclient import StreamState
from kurrentdbclient.common import construct_filter_include_regex

from sluice.eventlog import ANY_VERSION, NO_STREAM, Checkpoint, DuplicateEventId, NewEvent, StreamAppend
from sluice.eventlog import WrongExpectedVersion
from sluice.eventlog.kurrentdb_codec import (
    ID_NAMESPACE,
    Part,
    after_position,
    build_attempt,
    check_in_order,
    checkpoint_event,
    checkpoint_stream,
    checkpoint_value,
    content_type,
    decode_event,
    decode_metadata,
    encode_event,
    encode_metadata,
    expected_state,
    id_stream,
    kurrent_event_id,
    merge_appends,
    parse_url,
    plan_bases,
    stream_filter,
    stream_name,
    unique_ids,
    versions_after,
    versions_to_read,
)

WHEN = datetime(2026, 3, 29, 1, 30, 0, 250, tzinfo=timezone.utc)
UUID_1 = "0c9a7a4e-9a59-4c4b-8d8e-0f7b5a2d6c11"


def _event(id: str = UUID_1, **metadata: str) -> NewEvent:
    return NewEvent(id=id, type="Happened", data=b'{"n": 1}', metadata=metadata)


def _recorded(stream: str, position: int, metadata: bytes = b"", version: int = 0) -> KurrentRecordedEvent:
    return KurrentRecordedEvent(type="Happened", data=b"{}", metadata=metadata, content_type="application/json",
                                id=uuid.UUID(UUID_1), stream_name=stream, stream_position=version,
                                commit_position=position, prepare_position=position, recorded_at=WHEN)


# -- URLs and names ------------------------------------------------------------------------------


@pytest.mark.parametrize(("url", "client_url", "prefix"), [
    ("kurrentdb://127.0.0.1:2113?tls=false", "kurrentdb://127.0.0.1:2113?tls=false", ""),
    ("kurrentdb://h:2113?tls=false&streamPrefix=prod-", "kurrentdb://h:2113?tls=false", "prod-"),
    ("esdb://admin:changeit@h:2113?StreamPrefix=a%20b&TlsVerifyCert=false", "esdb://admin:changeit@h:2113?TlsVerifyCert=false",
     "a b"),
    ("kdb+discover://h1:2113,h2:2113?streamprefix=x", "kdb+discover://h1:2113,h2:2113", "x"),
    ("kurrentdb://h:2113", "kurrentdb://h:2113", ""),
])
def test_parse_url_takes_sluices_prefix_option_out(url: str, client_url: str, prefix: str) -> None:
    assert parse_url(url) == (client_url, prefix)


@pytest.mark.parametrize("url", ["postgresql://h/db", "kurrentdb:/h", "http://h:2113", "kurrentdb://h?streamPrefix=$x"])
def test_parse_url_refuses_what_is_not_a_kurrentdb_url(url: str) -> None:
    with pytest.raises(ValueError):
        parse_url(url)


def test_stream_names_get_the_prefix_and_reserved_names_are_refused() -> None:
    assert stream_name("p-", "schedule-1") == "p-schedule-1"
    assert stream_name("", "run-1") == "run-1"
    for reserved in ("", "@id-1", "@checkpoint-x", "$settings", "$$meta"):
        with pytest.raises(ValueError):
            stream_name("p-", reserved)


def test_internal_stream_names() -> None:
    assert id_stream("p-", uuid.UUID(UUID_1)) == f"p-@id-{UUID_1}"
    assert checkpoint_stream("p-", "matcher/bus") == "p-@checkpoint-matcher/bus"


@pytest.mark.parametrize(("prefix", "stream", "selected"), [
    ("p-", "p-schedule-1", True),
    ("p-", "p-@id-1", False),
    ("p-", "p-@checkpoint-bus", False),
    ("p-", "q-schedule-1", False),
    ("p-", "$$p-schedule-1", False),
    ("", "schedule-1", True),
    ("", "$settings", False),
    ("", "@checkpoint-bus", False),
    ("a.b+(", "a.b+(s", True),
    ("a.b+(", "axb+(s", False),     # the prefix is matched literally
    ("p-", "p-multi\nline", True),
])
def test_the_stream_filter_selects_this_logs_sluice_streams(prefix: str, stream: str, selected: bool) -> None:
    regex = construct_filter_include_regex([stream_filter(prefix)])  # anchored as kurrentdbclient sends it
    assert bool(re.search(regex, stream)) is selected


# -- events and metadata -------------------------------------------------------------------------


def test_event_ids_that_are_canonical_uuids_are_kept_others_are_derived() -> None:
    assert kurrent_event_id(UUID_1) == (uuid.UUID(UUID_1), None)
    assert kurrent_event_id(UUID_1.upper()) == (uuid.uuid5(ID_NAMESPACE, UUID_1.upper()), UUID_1.upper())
    assert kurrent_event_id("run-1/0") == (uuid.uuid5(ID_NAMESPACE, "run-1/0"), "run-1/0")


@pytest.mark.parametrize(("data", "expected"), [
    (b'{"a": 1}', "application/json"),
    (b"[1, 2]", "application/json"),
    ('"ünïcode"'.encode(), "application/json"),
    (b"", "application/octet-stream"),
    (b"NaN", "application/octet-stream"),
    (b"\xff\xfe{}", "application/octet-stream"),
    (bytes(range(10)), "application/octet-stream"),
])
def test_content_type(data: bytes, expected: str) -> None:
    assert content_type(data) == expected


def test_metadata_escapes_keys_the_adapter_or_the_server_use() -> None:
    user = {"a": "1", "~x": "2", "$schema.name": "3", "": "4", "~": "5"}
    encoded = encode_metadata(user, WHEN, original_id="run-1/0")
    assert encoded == {"a": "1", "~~x": "2", "~$schema.name": "3", "~": "4", "~~": "5",
                       "~recorded_at": "2026-03-29T01:30:00.000250+00:00", "~id": "run-1/0"}
    assert not any(key.startswith("$") for key in encoded)
    server_added = {"$schema.name": "Happened", "$schema.format": "Json", "$traceId": "t"}
    assert decode_metadata({**encoded, **server_added}) == (
        user, {"~recorded_at": "2026-03-29T01:30:00.000250+00:00", "~id": "run-1/0"})


@given(st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=6))
def test_metadata_round_trips_whatever_the_keys(metadata: dict[str, str]) -> None:
    stored = json.loads(json.dumps(encode_metadata(metadata, WHEN, None)))
    assert decode_metadata(stored)[0] == metadata


def test_an_event_round_trips_through_its_kurrentdb_form() -> None:
    event = NewEvent(id="run-1/0", type="RunStarted", data=b'{"n": 1}', metadata={"k": "v"})
    stored = encode_event(event, WHEN)
    assert (stored.type, stored.data, stored.content_type) == ("RunStarted", b'{"n": 1}', "application/json")
    recorded = KurrentRecordedEvent(type=stored.type, data=stored.data, metadata=stored.metadata,
                                    content_type=stored.content_type, id=stored.id, stream_name="p-run-1",
                                    stream_position=4, commit_position=9000, prepare_position=9000,
                                    recorded_at=datetime(2000, 1, 1, tzinfo=timezone.utc))
    decoded = decode_event("p-", recorded)
    assert (decoded.id, decoded.stream, decoded.version, decoded.position, decoded.type, decoded.data) == (
        "run-1/0", "run-1", 4, 9000, "RunStarted", b'{"n": 1}')
    assert (dict(decoded.metadata), decoded.recorded_at) == ({"k": "v"}, WHEN)


def test_events_written_by_other_tools_decode_with_the_servers_time() -> None:
    for metadata in (b"", b"not json", b'"a string"', b'{"n": 1, "s": "x"}'):
        decoded = decode_event("", _recorded("s", 100, metadata))
        assert (decoded.id, decoded.recorded_at) == (UUID_1, WHEN)
    assert decode_event("", _recorded("s", 100, b'{"n": 1, "s": "x"}')).metadata == {"s": "x"}


def test_after_position_drops_the_start_and_fails_loudly_on_disorder() -> None:
    events = [_recorded("s", p) for p in (100, 250, 400)]
    assert [e.commit_position for e in after_position(events, 100)] == [250, 400]
    assert [e.commit_position for e in after_position(events, 0)] == [100, 250, 400]
    with pytest.raises(RuntimeError, match="commit position 250 after 400"):
        after_position([_recorded("s", 400), _recorded("s", 250)], 0)


def test_checkpoint_events_hold_the_value() -> None:
    event = checkpoint_event(2**62, uuid.UUID(UUID_1))
    assert (event.type, json.loads(event.data), event.id) == ("CheckpointSaved", {"value": 2**62}, uuid.UUID(UUID_1))
    stored = KurrentRecordedEvent(type=event.type, data=event.data, metadata=b"", content_type="application/json",
                                  id=event.id, stream_name="p-@checkpoint-bus", stream_position=0, commit_position=1,
                                  prepare_position=1)
    assert checkpoint_value(stored) == 2**62


# -- planning an append -----------------------------------------------------------------------------


def _append(stream: str, n: int, expected: int) -> StreamAppend:
    return StreamAppend(stream, [_event(str(uuid.uuid4())) for _ in range(n)], expected)


def test_merge_appends_one_part_per_stream_in_order() -> None:
    parts = merge_appends([_append("a", 2, NO_STREAM), _append("b", 1, ANY_VERSION), _append("a", 1, 1),
                           _append("b", 2, 7)])
    assert [(p.stream, len(p.events), p.required) for p in parts] == [("a", 3, NO_STREAM), ("b", 3, 6)]


@pytest.mark.parametrize("appends", [
    [_append("a", 2, NO_STREAM), _append("a", 1, 0)],      # after two events the version is 1, not 0
    [_append("a", 1, 3), _append("a", 1, 3)],
    [_append("a", 2, ANY_VERSION), _append("a", 1, 0)],    # the stream would have to be at -2
    [_append("a", 1, ANY_VERSION), _append("a", 1, NO_STREAM)],
])
def test_merge_appends_sees_expectations_no_version_satisfies(appends: list[StreamAppend]) -> None:
    assert merge_appends(appends) is None


def test_merge_appends_refuses_invalid_expected_versions() -> None:
    with pytest.raises(ValueError, match="invalid expected version -3"):
        merge_appends([_append("a", 1, -3)])


_streams = st.sampled_from(["a", "b"])
_appends = st.lists(st.builds(_append, _streams, st.integers(0, 3), st.integers(-2, 5)), max_size=5)
_actuals = st.fixed_dictionaries({"a": st.integers(-1, 6), "b": st.integers(-1, 6)})


@given(_appends, _actuals)
def test_the_merged_plan_accepts_exactly_what_the_ports_rule_accepts(appends: list[StreamAppend],
                                                                      actual: dict[str, int]) -> None:
    parts = merge_appends(appends)
    try:
        check_in_order(appends, actual)
        accepted = True
    except WrongExpectedVersion:
        accepted = False
    if parts is None:
        assert not accepted
        return
    assert accepted == all(part.required in (None, actual[part.stream]) for part in parts)
    if accepted:
        bases = {part.stream: actual[part.stream] for part in parts}
        assert plan_bases(parts, actual) == bases
        running, expected_versions = dict(actual), []
        for append in appends:
            running[append.stream] += len(append.events)
            expected_versions.append(running[append.stream])
        assert versions_after(appends, bases) == expected_versions


def test_which_versions_are_read_and_how_bases_are_planned() -> None:
    parts = [Part("exact", (_event(),), 3), Part("any", (_event(),), None), Part("empty", (), 2),
             Part("empty-any", (), None)]
    assert versions_to_read(parts) == ["any", "empty", "empty-any"]
    assert plan_bases(parts, {"any": 5, "empty": 2, "empty-any": -1}) == {"exact": 3, "any": 5, "empty": 2,
                                                                         "empty-any": -1}
    assert plan_bases(parts, {"any": 5, "empty": 4, "empty-any": -1}) is None


def test_check_in_order_names_the_first_stream_that_conflicts() -> None:
    with pytest.raises(WrongExpectedVersion) as raised:
        check_in_order([_append("a", 1, 0), _append("b", 1, NO_STREAM), _append("a", 1, 2)], {"a": 0, "b": 0})
    assert (raised.value.stream, raised.value.expected, raised.value.actual) == ("b", NO_STREAM, 0)


def test_unique_ids_within_a_batch() -> None:
    unique_ids([_append("a", 2, NO_STREAM), _append("b", 2, NO_STREAM)])
    twice = _event(str(uuid.uuid4()))
    with pytest.raises(DuplicateEventId):
        unique_ids([StreamAppend("a", [twice], NO_STREAM), StreamAppend("b", [twice], NO_STREAM)])


def test_expected_state() -> None:
    assert expected_state(NO_STREAM) is StreamState.NO_STREAM
    assert expected_state(0) == 0 and expected_state(41) == 41


def test_build_attempt_writes_events_then_reservations_then_checkpoints() -> None:
    ids = iter(uuid.UUID(int=n) for n in count(1))
    e1, e2, e3 = _event(str(uuid.uuid4())), _event(str(uuid.uuid4())), _event("not-a-uuid")
    parts = [Part("a", (e1, e2), None), Part("b", (e3,), NO_STREAM), Part("c", (), 4)]
    attempt = build_attempt("p-", parts, {"a": 6, "b": NO_STREAM, "c": 4},
                            [Checkpoint("bus", 1), Checkpoint("timer", 2), Checkpoint("bus", 3)], WHEN,
                            lambda: next(ids))
    summary = [(r.stream_name, [e.type for e in r.events], r.current_version) for r in attempt.requests]
    reserved = [id_stream("p-", kurrent_event_id(e.id)[0]) for e in (e1, e2, e3)]
    assert summary == [
        ("p-a", ["Happened", "Happened"], 6),
        ("p-b", ["Happened"], StreamState.NO_STREAM),
        (reserved[0], ["EventIdReserved"], StreamState.NO_STREAM),
        (reserved[1], ["EventIdReserved"], StreamState.NO_STREAM),
        (reserved[2], ["EventIdReserved"], StreamState.NO_STREAM),
        ("p-@checkpoint-bus", ["CheckpointSaved"], StreamState.ANY),
        ("p-@checkpoint-timer", ["CheckpointSaved"], StreamState.ANY),
    ]
    assert attempt.reservations == dict(zip(reserved, [e1.id, e2.id, e3.id]))
    assert attempt.first_reservation == (reserved[0], uuid.UUID(int=1))
    assert json.loads(list(attempt.requests[-2].events)[0].data) == {"value": 3}  # the last value of a name wins
    assert attempt.has_events
    assert not build_attempt("p-", [], {}, [Checkpoint("bus", 1)], WHEN).has_events
