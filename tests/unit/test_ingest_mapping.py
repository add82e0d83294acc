"""services/ingest/mapping.py: S3 events to partition notifications, hostile keys refused (pure)."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice_services.ingest.mapping import (
    Announce, Ignore, MappingError, Refuse, parse_message, parse_route, parse_route_option, parse_routes)

CLICKSTREAM = {"bucket": "raw", "prefix": "clickstream/", "namespace": "clickstream", "dataset": "events",
               "pattern": "marketplace={marketplace}/date={date}/hour={hour}/_SUCCESS"}
ROUTES = (parse_route(CLICKSTREAM),
          parse_route({"bucket": "raw", "prefix": "logs/", "pattern": "dt={date}/*", "namespace": "ops",
                       "dataset": "logs"}))


def event(key: str, *, bucket: str = "raw", name: str = "ObjectCreated:Put", size: object = 0,
          sequencer: str | None = "0055AED6DCD90281E5", etag: str | None = "d41d8cd98f00b204e9800998ecf8427e",
          time: str = "2024-03-01T10:00:01.123Z", encode=lambda key: quote_plus(key, safe="/")) -> dict:
    obj = {"key": encode(key), "size": size}
    if sequencer is not None:
        obj["sequencer"] = sequencer
    if etag is not None:
        obj["eTag"] = etag
    return {"eventVersion": "2.1", "eventSource": "aws:s3", "eventName": name, "eventTime": time,
            "s3": {"s3SchemaVersion": "1.0", "bucket": {"name": bucket, "arn": f"arn:aws:s3:::{bucket}"},
                   "object": obj}}


def message(*records: dict) -> bytes:
    return json.dumps({"Records": list(records)}).encode()


def one(value: bytes):
    outcomes = parse_message(value, ROUTES)
    assert len(outcomes) == 1
    return outcomes[0]


def test_a_marker_announces_its_partition_with_keys_location_size_and_event_time():
    outcome = one(message(event("clickstream/marketplace=US/date=2024-03-01/hour=09/_SUCCESS", size=1234)))
    assert isinstance(outcome, Announce)
    notification = outcome.notification
    payload = notification.payload
    assert (payload.namespace, payload.dataset) == ("clickstream", "events")
    [partition] = payload.partitions
    assert list(partition.key.items()) == [("marketplace", "US"), ("date", "2024-03-01"), ("hour", "09")]
    assert partition.location == "s3://raw/clickstream/marketplace=US/date=2024-03-01/hour=09"
    assert partition.size_bytes == 1234
    assert partition.metadata["source"] == "s3://raw/clickstream/marketplace=US/date=2024-03-01/hour=09/_SUCCESS"
    assert notification.time == datetime(2024, 3, 1, 10, 0, 1, 123000, tzinfo=timezone.utc)


def test_minio_event_names_and_keys_with_encoded_slashes_are_understood():
    minio = event("clickstream/marketplace=JP/date=2024-03-01/hour=23/_SUCCESS", name="s3:ObjectCreated:Put",
                  encode=lambda key: quote_plus(key, safe=""))  # MinIO's url.QueryEscape encodes '/'
    assert isinstance(one(message(minio)), Announce)


def test_the_notification_id_is_the_events_a_redelivery_has_the_same_a_rewrite_a_new_one():
    key = "clickstream/marketplace=US/date=2024-03-01/hour=09/_SUCCESS"
    first, again = one(message(event(key))), one(message(event(key)))
    rewritten = one(message(event(key, sequencer="0055AED6DCD90281F0")))
    assert first.notification.id == again.notification.id != rewritten.notification.id
    by_etag = [one(message(event(key, sequencer=None, etag=etag))).notification.id for etag in ("a", "a", "b")]
    assert by_etag[0] == by_etag[1] != by_etag[2]
    other_key = one(message(event(key.replace("US", "UK")))).notification.id
    assert other_key != first.notification.id


def test_data_files_beside_a_marker_and_other_events_are_ignored_not_dead_lettered():
    assert isinstance(one(message(event("clickstream/marketplace=US/date=2024-03-01/hour=09/part-0.parquet"))),
                      Ignore)
    assert isinstance(one(message(event("clickstream/marketplace=US/date=2024-03-01/hour=09/_SUCCESS",
                                        name="ObjectRemoved:Delete"))), Ignore)
    assert isinstance(one(json.dumps({"Service": "Amazon S3", "Event": "s3:TestEvent"}).encode()), Ignore)


def test_a_wildcard_route_announces_every_object():
    outcome = one(message(event("logs/dt=2024-03-01/app.log.gz", size=10)))
    assert isinstance(outcome, Announce)
    assert outcome.notification.payload.partitions[0].location == "s3://raw/logs/dt=2024-03-01"


@pytest.mark.parametrize("key", [
    "clickstream/marketplace=US/date=2024-03-01/_SUCCESS",             # a segment short
    "clickstream/market=US/date=2024-03-01/hour=09/_SUCCESS",          # another key name
    "elsewhere/marketplace=US/date=2024-03-01/hour=09/_SUCCESS",       # another prefix
    "clickstream/marketplace=/date=2024-03-01/hour=09/_SUCCESS",       # an empty value
])
def test_a_key_no_route_matches_is_dead_lettered(key):
    outcome = one(message(event(key)))
    assert isinstance(outcome, Refuse) and outcome.reason.startswith("no route:") and outcome.record == 0


def test_another_bucket_is_dead_lettered():
    outcome = one(message(event("clickstream/marketplace=US/date=2024-03-01/hour=09/_SUCCESS", bucket="other")))
    assert isinstance(outcome, Refuse) and "no route" in outcome.reason


HOSTILE_VALUES = [
    "..", ".", "...", "%2E%2E", "%2e%2e%2f", "a%2Fb", "%252F", "a\\b", "x\x00y", "x\ny", "US\u202eSU",
    "U\u200bS", "a\uff0fb", "a\u2215b", "\u2025", "caf\u0065\u0301", "a b", "a:b", "a=b", "{x}", "x" * 256,
]


@pytest.mark.parametrize("value", HOSTILE_VALUES)
def test_hostile_key_values_are_refused_never_turned_into_locations(value):
    key = f"clickstream/marketplace={value}/date=2024-03-01/hour=09/_SUCCESS"
    outcome = one(message(event(key)))
    assert isinstance(outcome, Refuse), (value, outcome)


@pytest.mark.parametrize("key", [
    "clickstream/../marketplace=US/date=2024-03-01/hour=09/_SUCCESS",
    "clickstream/marketplace=US/./date=2024-03-01/hour=09/_SUCCESS",
    "clickstream//marketplace=US/date=2024-03-01/hour=09/_SUCCESS",
    "clickstream/marketplace=US/date=2024-03-01/hour=09/%2E%2E",
    "clickstream/marketplace=US/date=2024-03-01/hour=09/_SUCCESS/..",
    "/clickstream/marketplace=US/date=2024-03-01/hour=09/_SUCCESS",
    "clickstream/marketplace=US/date=2024-03-01/hour=" + "9" * 2000 + "/_SUCCESS",
])
def test_hostile_keys_are_refused(key):
    outcome = one(message(event(key)))
    assert isinstance(outcome, Refuse), (key, outcome)


def test_double_encoded_traversal_stays_refused_after_the_one_decoding():
    raw = "clickstream/marketplace=%252E%252E/date=2024-03-01/hour=09/_SUCCESS"
    outcome = one(message(event(raw, encode=lambda key: key)))
    assert isinstance(outcome, Refuse) and "percent-encoded" in outcome.reason


def test_invalid_utf8_in_the_encoded_key_is_refused():
    outcome = one(message(event("clickstream/marketplace=%FF/date=2024-03-01/hour=09/_SUCCESS",
                                encode=lambda key: key)))
    assert isinstance(outcome, Refuse) and "UTF-8" in outcome.reason


def test_unicode_letters_are_values():
    outcome = one(message(event("clickstream/marketplace=日本/date=2024-03-01/hour=09/_SUCCESS",
                                encode=lambda key: quote(key, safe="/"))))
    assert isinstance(outcome, Announce)
    assert outcome.notification.payload.partitions[0].key["marketplace"] == "日本"


@pytest.mark.parametrize("value, reason", [
    (b"", "malformed: an empty message"),
    (b"{not json", "malformed: not JSON"),
    (b"\xff\xfe", "malformed: not JSON"),
    (b"[1, 2]", "malformed: expected a JSON object"),
    (b'{"Records": []}', "malformed: Records must be a non-empty list"),
    (b'{"Records": "x"}', "malformed: Records must be a non-empty list"),
    (b'{"other": 1}', "malformed: no Records"),
    (b"[" * 100_000, "malformed: not JSON"),
    (b" " * (1024 * 1024 + 1), "oversized"),
])
def test_malformed_messages_are_refused_whole(value, reason):
    outcome = one(value)
    assert isinstance(outcome, Refuse) and outcome.reason.startswith(reason) and outcome.record is None


@pytest.mark.parametrize("change, reason", [
    (lambda r: r.pop("eventTime"), "eventTime must be a non-empty string"),
    (lambda r: r.update(eventTime="yesterday"), "not an ISO 8601 time"),
    (lambda r: r.update(eventTime="2024-03-01T10:00:00"), "has no time zone"),
    (lambda r: r["s3"]["object"].update(size=-1), "size must be an integer"),
    (lambda r: r["s3"]["object"].update(size="12"), "size must be an integer"),
    (lambda r: r["s3"]["object"].update(size=True), "size must be an integer"),
    (lambda r: r["s3"]["object"].update(size=2**63), "size must be an integer"),
    (lambda r: r["s3"]["object"].pop("key"), "s3.object.key must be a non-empty string"),
    (lambda r: r["s3"].pop("bucket"), "s3.bucket.name must be a non-empty string"),
    (lambda r: r.update(s3=[]), "s3 is not an object"),
    (lambda r: r["s3"]["object"].update(sequencer=None, eTag=None), "neither sequencer nor eTag"),
    (lambda r: r["s3"]["object"].update(sequencer=5), "sequencer must be a string"),
])
def test_malformed_records_are_refused_with_the_field_named(change, reason):
    record = event("clickstream/marketplace=US/date=2024-03-01/hour=09/_SUCCESS")
    change(record)
    outcome = one(message(record))
    assert isinstance(outcome, Refuse) and reason in outcome.reason, outcome


def test_each_record_of_a_message_has_its_own_outcome():
    good = event("clickstream/marketplace=US/date=2024-03-01/hour=09/_SUCCESS")
    outcomes = parse_message(message(good, "nonsense", event("nowhere/x")), ROUTES)
    assert [type(o) for o in outcomes] == [Announce, Refuse, Refuse]
    assert [o.record for o in outcomes] == [0, 1, 2]


@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode)
       | st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                      lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                  max_size=4)).map(
           lambda doc: json.dumps({"Records": [doc]}).encode()))
def test_no_input_makes_it_raise(value):
    assert all(isinstance(o, (Announce, Refuse, Ignore)) for o in parse_message(value, ROUTES))


@given(st.text(min_size=1, max_size=60))
def test_whatever_the_value_an_announced_location_stays_under_its_prefix_without_traversal(value):
    key = f"clickstream/marketplace={value}/date=2024-03-01/hour=09/_SUCCESS"
    outcome = one(message(event(key)))
    if isinstance(outcome, Announce):
        location = outcome.notification.payload.partitions[0].location
        assert location.startswith("s3://raw/clickstream/marketplace=")
        segments = location.removeprefix("s3://").split("/")
        assert len(segments) == 5 and not any(s in ("", ".", "..") or "%" in s or "\\" in s for s in segments)


# -- configuration -------------------------------------------------------------------------------


def test_routes_from_toml_and_from_the_command_line_are_the_same():
    toml = parse_routes({"route": [CLICKSTREAM]})
    option = parse_route_option('bucket=raw prefix=clickstream/ dataset=clickstream.events '
                                'pattern="marketplace={marketplace}/date={date}/hour={hour}/_SUCCESS"')
    assert toml == (option,)


@pytest.mark.parametrize("change, text", [
    ({"bucket": "Raw_Bucket"}, "bucket"),
    ({"bucket": "a..b"}, "bucket"),
    ({"namespace": "click.stream"}, "namespace"),
    ({"dataset": ""}, "dataset"),
    ({"prefix": "clickstream"}, "must be empty or end with '/'"),
    ({"prefix": "../"}, "prefix"),
    ({"pattern": ""}, "pattern: required"),
    ({"pattern": "_SUCCESS"}, "at least one {name}"),
    ({"pattern": "a={a}/b={a}/_SUCCESS"}, "appears twice"),
    ({"pattern": "{a}{b}/_SUCCESS"}, "at most one"),
    ({"pattern": "a={a.b}/_SUCCESS"}, "identifier"),
    ({"pattern": "*/a={a}/_SUCCESS"}, "only for the last segment"),
    ({"pattern": "a={a}/{b}"}, "last segment"),
    ({"pattern": "a={a}/../_SUCCESS"}, "not plain text"),
    ({"pattern": "a={a}//_SUCCESS"}, "not plain text"),
    ({"extra": "x"}, "unknown key"),
    ({"bucket": 5}, "expected a string"),
])
def test_a_wrong_route_is_refused_naming_the_field(change, text):
    with pytest.raises(MappingError, match=None) as refused:
        parse_route({**CLICKSTREAM, **change}, "route[0]")
    assert text in str(refused.value) and "route[0]" in str(refused.value)


def test_a_mapping_needs_routes():
    with pytest.raises(MappingError, match="no routes"):
        parse_routes({})
    with pytest.raises(MappingError, match="unknown top-level"):
        parse_routes({"routes": []})
