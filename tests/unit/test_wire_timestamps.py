"""The wire's timestamp conversions give what protobuf's own Timestamp.FromDatetime/ToDatetime give."""
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from google.protobuf import timestamp_pb2
from hypothesis import given, strategies as st

from sluice.domain.bounds import LATEST_SECONDS
from sluice.domain.errors import InvalidArgument
from sluice.wire.common import timestamp_from_proto, timestamp_to_proto

ZONES = st.sampled_from([timezone.utc, timezone(timedelta(hours=-7, minutes=-30)), ZoneInfo("Europe/Berlin"),
                         ZoneInfo("America/New_York")])
MOMENTS = st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=ZONES)


@given(MOMENTS)
def test_to_proto_is_from_datetime(when):
    expected = timestamp_pb2.Timestamp()
    expected.FromDatetime(when.astimezone(timezone.utc))
    assert timestamp_to_proto(when) == expected


@given(st.integers(-2_000_000_000, 7_000_000_000), st.integers(0, 999_999_999))
def test_from_proto_is_to_datetime(seconds, nanos):
    stamp = timestamp_pb2.Timestamp(seconds=seconds, nanos=nanos)
    assert timestamp_from_proto(stamp) == stamp.ToDatetime(tzinfo=timezone.utc)
    assert timestamp_from_proto(stamp).utcoffset() == timedelta(0)


def test_none_stays_none():
    assert timestamp_to_proto(None) is None


def test_a_time_out_of_bounds_is_refused_each_time_it_comes_with_its_path():
    stamp = timestamp_pb2.Timestamp(seconds=LATEST_SECONDS)
    for path in ("job.created_at", "job.triggered_at"):
        with pytest.raises(InvalidArgument, match=path.replace(".", r"\.")):
            timestamp_from_proto(stamp, path)


def test_a_time_seen_again_is_the_same_time():
    stamp = timestamp_pb2.Timestamp(seconds=1_795_437_000, nanos=5000)
    assert timestamp_from_proto(stamp) is timestamp_from_proto(timestamp_pb2.Timestamp.FromString(stamp.SerializeToString()))
