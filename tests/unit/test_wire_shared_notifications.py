"""A notification parsed again (the matcher's copy per matches partition, the checker's jobs it
fired) is the object parsed first, while it is among the last ones kept; what is refused, or large,
is parsed each time, and the kept ones stay bounded."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from sluice.domain.common import Notification, PartitionCommitted, PartitionRef
from sluice.domain.errors import InvalidArgument
from sluice.v1 import notifications_pb2 as pb
from sluice.wire import common
from sluice.wire.common import (
    SHARED_NOTIFICATION_BYTES,
    SHARED_NOTIFICATIONS,
    notification_to_proto,
    shared_notification_from_proto,
)

T0 = datetime(2026, 11, 27, 6, tzinfo=timezone.utc)


def message(index: int, location: str = "/data/hour=06") -> pb.Notification:
    return notification_to_proto(Notification(f"n-{index}", T0, PartitionCommitted(
        "bench", "clicks", (PartitionRef({"hour": "06"}, location, 10, 1, {"owner": "a"}),))))


def test_the_same_notification_is_one_object_and_another_content_another():
    first = shared_notification_from_proto(message(1))
    again = shared_notification_from_proto(pb.Notification.FromString(message(1).SerializeToString()))
    assert again is first
    moved = shared_notification_from_proto(message(1, location="/data/hour=07"))
    assert moved is not first
    assert moved.payload.partitions[0].location == "/data/hour=07"


def test_a_refused_notification_is_refused_each_time():
    hostile = message(2)
    hostile.partition_committed.dataset = " "
    for _ in range(2):
        with pytest.raises(InvalidArgument, match="notification.partition_committed.dataset"):
            shared_notification_from_proto(hostile)


def test_a_large_notification_is_parsed_each_time():
    large = message(3, location="/" + "x" * SHARED_NOTIFICATION_BYTES)
    first = shared_notification_from_proto(large)
    assert shared_notification_from_proto(large) == first
    assert shared_notification_from_proto(large) is not first


def test_the_kept_notifications_stay_bounded():
    for index in range(SHARED_NOTIFICATIONS + 10):
        shared_notification_from_proto(message(100 + index))
    assert len(common._SHARED) == SHARED_NOTIFICATIONS
