"""The matcher lookup reads a notification's event key without converting it, and refuses exactly
what the conversion (`notification_from_bytes`) refuses, with the same error."""
from __future__ import annotations

from datetime import datetime, timezone

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.domain.common import Notification, PartitionCommitted, PartitionRef, ProgramRef, ProgramStatusChanged, RunStatus
from sluice.v1 import notifications_pb2 as pb
from sluice.wire.common import notification_from_bytes, notification_to_proto
from sluice_services.matcher.notification_key import notification_event_key
from tests.fuzz.inputs import encode, messages, mutated, one_field_changed, random_bytes

AT = datetime(2026, 11, 27, 9, tzinfo=timezone.utc)
COMMITTED = notification_to_proto(Notification("n-1", AT, PartitionCommitted(
    "web", "clicks", (PartitionRef({"hour": "09", "region": "eu"}, "/d/09", 1024, 10, {"m": "v"}),
                      PartitionRef({"hour": "10", "region": "eu"}, "/d/10")))))
STATUS = notification_to_proto(Notification("n-2", AT, ProgramStatusChanged(
    ProgramRef("web", "app", "prog"), "run-1", RunStatus.COMPLETED, "s-1", "j-1")))


def outcome(function, data: bytes) -> tuple[str, str]:
    try:
        result = function(data)
    except Exception as error:  # the comparison is of any error, a bug's included
        return "refused", f"{type(error).__name__}: {error}"
    return "key", result if isinstance(result, str) else result.event_key()


def assert_same(data: bytes) -> None:
    assert outcome(notification_event_key, data) == outcome(notification_from_bytes, data)


def test_a_valid_notification_s_key_is_its_event_key() -> None:
    assert notification_event_key(COMMITTED.SerializeToString()) == "partition:web.clicks"
    assert notification_event_key(STATUS.SerializeToString()) == "program:web.app.prog.COMPLETED"


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(one_field_changed(COMMITTED), one_field_changed(STATUS)))
def test_one_field_changed_is_refused_or_keyed_as_the_conversion_does(changed) -> None:
    message, _ = changed
    assert_same(encode(message))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(mutated(COMMITTED.SerializeToString()), mutated(STATUS.SerializeToString())))
def test_mutated_bytes_are_refused_or_keyed_as_the_conversion_does(mutation) -> None:
    data, _ = mutation
    assert_same(data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(random_bytes(), messages(pb.Notification.DESCRIPTOR).map(encode)))
def test_any_bytes_are_refused_or_keyed_as_the_conversion_does(data: bytes) -> None:
    assert_same(data)


def test_the_refusals_name_the_field() -> None:
    empty_dataset = pb.Notification()
    empty_dataset.CopyFrom(COMMITTED)
    empty_dataset.partition_committed.dataset = " "
    bad_size = pb.Notification()
    bad_size.CopyFrom(COMMITTED)
    bad_size.partition_committed.partitions[1].size_bytes = -1
    for message, field in ((empty_dataset, "notification.partition_committed.dataset"),
                           (bad_size, "notification.partition_committed.partitions[1].size_bytes")):
        kind, error = outcome(notification_event_key, message.SerializeToString())
        assert kind == "refused" and field in error
        assert_same(message.SerializeToString())
