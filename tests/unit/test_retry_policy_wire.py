"""The retry policy from a client's schedule to the launcher's job: defaults, round trips, and
bad values rejected naming the field."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest
from google.protobuf import duration_pb2

from sluice.domain.common import ProgramRef
from sluice.domain.jobs import DEFAULT_RETRY_POLICY, Job, RetryPolicy, TriggerContext
from sluice.domain.errors import InvalidArgument
from sluice.v1 import notifications_pb2 as npb, schedules_pb2 as spb
from sluice.wire.jobs import job_from_proto, job_to_proto
from sluice.wire.schedules import schedule_from_proto, schedule_to_proto


def message(**retry) -> spb.Schedule:
    schedule = spb.Schedule(name="hourly", program=npb.ProgramRef(namespace="web", app="analytics", program="counts"),
                            trigger=spb.Trigger(elapsed=spb.ElapsedTrigger(seconds=60)))
    if retry:
        schedule.retry_policy.CopyFrom(spb.RetryPolicy(**retry))
    return schedule


def test_a_schedule_without_a_retry_policy_gets_the_default():
    assert schedule_from_proto(message(), "s1").retry_policy == DEFAULT_RETRY_POLICY == RetryPolicy(2, 60, 2.0, False)


def test_unset_delay_and_backoff_take_their_defaults():
    policy = schedule_from_proto(message(max_retries=5, retry_failed=True), "s1").retry_policy
    assert policy == RetryPolicy(max_retries=5, delay_seconds=60, backoff=2.0, retry_failed=True)


def test_a_retry_policy_survives_the_round_trip_through_schedule_and_job():
    policy = RetryPolicy(max_retries=0, delay_seconds=0, backoff=1.0, retry_failed=True)
    schedule = schedule_from_proto(message(max_retries=0, delay=duration_pb2.Duration(seconds=0), backoff=1.0,
                                           retry_failed=True), "s1")
    assert schedule.retry_policy == policy
    assert schedule_from_proto(schedule_to_proto(schedule), "s1").retry_policy == policy
    job = Job("j1", "s1", 1, ProgramRef("web", "analytics", "counts"), TriggerContext("s1", "hourly"),
              datetime(2026, 11, 23, tzinfo=timezone.utc), retry_policy=policy)
    assert job_from_proto(job_to_proto(job)) == job


@pytest.mark.parametrize("retry, field", [
    ({"max_retries": -1}, "schedule.retry_policy.max_retries"),
    ({"delay": duration_pb2.Duration(seconds=-5)}, "schedule.retry_policy.delay"),
    ({"backoff": 0.5}, "schedule.retry_policy.backoff"),
    ({"backoff": float("nan")}, "schedule.retry_policy.backoff"),
])
def test_bad_retry_values_are_invalid_arguments_naming_the_field(retry, field):
    with pytest.raises(InvalidArgument) as error:
        schedule_from_proto(message(**retry), "s1")
    assert error.value.field == field
