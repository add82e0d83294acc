"""An outbox route's job straight from its event's JSON (sluice.wire.job_json) is the message
job_to_proto makes of the decoded job; a job of another shape, or with a value of
another type, is decoded as before (and fails as it did)."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from google.protobuf import duration_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.domain.checking import JobAdmitted, JobsAdmitted
from sluice.domain.common import Notification, PartitionCommitted, PartitionRef, ProgramRef, ProgramStatusChanged, RunStatus
from sluice.domain.constraints.specs import (
    ConcurrencyConstraint,
    DelayConstraint,
    MaxRunsPerWindowConstraint,
    MinSinceLastRunConstraint,
    NotMetPolicy,
    TimeoutPolicy,
    TimeWindowConstraint,
)
from sluice.domain.jobs import Job, JobState, RetryPolicy, TriggerContext, WaitingJobPolicy
from sluice.domain.matching import JobTriggered
from sluice.eventlog.codec import EventTypes, encode, from_jsonable
from sluice.eventlog.port import RecordedEvent
from sluice.v1 import jobs_pb2
from sluice.wire.job_json import event_job_fields, job_message, jobs_messages
from sluice.wire.common import notification_to_proto, program_to_proto, timestamp_to_proto
from sluice.wire.jobs import job_to_proto
from sluice.wire.schedules import (
    constraint_to_proto,
    retry_policy_to_proto,
    timeout_policy_to_proto,
    waiting_job_policy_to_proto,
)

T0 = datetime(2026, 11, 23, 12, 30, tzinfo=timezone.utc)
TYPES = EventTypes([JobTriggered, JobAdmitted, JobsAdmitted])
EXAMPLES = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))

texts = st.text(max_size=8)
counts = st.integers(0, 2**31 - 1)
times = st.builds(lambda seconds, micros, hours: (T0 + timedelta(seconds=seconds, microseconds=micros)).astimezone(
    timezone(timedelta(hours=hours))), st.integers(-10**8, 10**8), st.integers(0, 999_999), st.integers(-12, 12))
programs = st.builds(ProgramRef, texts, texts, texts)
policies = st.sampled_from(NotMetPolicy)
constraints = st.one_of(
    st.builds(ConcurrencyConstraint, counts, texts, policies),
    st.builds(DelayConstraint, counts, policies),
    st.builds(TimeWindowConstraint, st.just("22:00"), st.just("06:00"), st.sampled_from(["UTC", "Europe/Paris"]), policies),
    st.builds(MinSinceLastRunConstraint, counts, policies),
    st.builds(MaxRunsPerWindowConstraint, counts, st.sampled_from(["day", "hour"]), st.just("UTC"), policies),
)
partitions = st.builds(PartitionRef, st.dictionaries(texts, texts, max_size=2), texts, counts, counts,
                       st.dictionaries(texts, texts, max_size=2))
notifications = st.builds(Notification, texts, times, st.one_of(
    st.builds(PartitionCommitted, texts, texts, st.lists(partitions, max_size=2).map(tuple)),
    st.builds(ProgramStatusChanged, programs, texts, st.sampled_from(RunStatus), texts, texts)))
contexts = st.builds(TriggerContext, texts, texts, st.dictionaries(texts, texts, max_size=3),
                     st.lists(notifications, max_size=3).map(tuple), st.none() | times)
jobs = st.builds(
    Job, texts, texts, counts, programs, contexts, times, st.integers(-2**31, 2**31 - 1),
    st.lists(constraints, max_size=3).map(tuple), counts, st.sampled_from(TimeoutPolicy), counts, st.none() | times,
    st.builds(RetryPolicy, st.integers(0, 10), counts, st.floats(1, 10), st.booleans()),
    st.sampled_from(WaitingJobPolicy), st.dictionaries(texts, texts, max_size=3), counts)


def job(**changes) -> Job:
    fields = dict(id="j-1", schedule_id="s-1", schedule_generation=1, program=ProgramRef("ns", "app", "prog"),
                  context=TriggerContext("s-1", "nightly", logical_time=T0), created_at=T0, triggered_at=T0)
    return Job(**{**fields, **changes})


def recorded(data: bytes, type_name: str = "JobTriggered") -> RecordedEvent:
    # an id this process never encoded: decoding reads the JSON, not the codec's cache of recent events
    return RecordedEvent("never-encoded", "matcher-s-1", 0, 1, type_name, data, {}, T0)


def sent(job: Job) -> jobs_pb2.JobTriggered:
    """What the route sent before: the message of the job, read back (a map's entries may be written in another order)."""
    return jobs_pb2.JobTriggered.FromString(jobs_pb2.JobTriggered(job=job_to_proto(job)).SerializeToString())


def decoded(data: bytes, type_name: str = "JobTriggered") -> jobs_pb2.JobTriggered:
    return sent(TYPES.decode(recorded(data, type_name)).job)


def routed(data: bytes, type_name: str = "JobTriggered") -> jobs_pb2.JobTriggered:
    message = job_message(recorded(data, type_name), TYPES, jobs_pb2.JobTriggered)
    return jobs_pb2.JobTriggered.FromString(message.SerializeToString())


@EXAMPLES
@given(jobs, st.booleans())
def test_the_job_of_an_event_is_what_job_to_proto_makes_of_the_decoded_job(fired, admitted):
    event = JobAdmitted(fired, T0, forced=True) if admitted else JobTriggered(fired, T0)
    data = encode(event, "e-1").data
    assert event_job_fields(data) is not None
    assert routed(data, type(event).__name__) == decoded(data, type(event).__name__) == sent(fired)


def field_by_field(job: Job, state: JobState | None, reason: str) -> jobs_pb2.Job:
    """job_to_proto as it was written before it built its message from plain values: each message made and copied in."""
    return jobs_pb2.Job(
        id=job.id, schedule_id=job.schedule_id, schedule_generation=job.schedule_generation,
        program=program_to_proto(job.program), state=jobs_pb2.JobState.Value(state.value) if state else 0,
        context=jobs_pb2.TriggerContext(
            schedule_id=job.context.schedule_id, schedule_name=job.context.schedule_name,
            properties=dict(job.context.properties),
            notifications=[notification_to_proto(n) for n in job.context.notifications],
            logical_time=timestamp_to_proto(job.context.logical_time)),
        reason=reason, created_at=timestamp_to_proto(job.created_at), priority=job.priority,
        constraints=[constraint_to_proto(c) for c in job.constraints],
        timeout=duration_pb2.Duration(seconds=job.timeout_seconds),
        timeout_policy=timeout_policy_to_proto(job.timeout_policy), sequence=job.sequence,
        triggered_at=timestamp_to_proto(job.triggered_at), retry_policy=retry_policy_to_proto(job.retry_policy),
        waiting_job_policy=waiting_job_policy_to_proto(job.waiting_job_policy), spark_conf=dict(job.spark_conf),
        max_run_seconds=job.max_run_seconds)


@EXAMPLES
@given(jobs, st.none() | st.sampled_from(JobState), texts)
def test_job_to_proto_is_the_message_built_field_by_field(listed, state, reason):
    built, expected = job_to_proto(listed, state, reason), field_by_field(listed, state, reason)
    assert built == expected
    assert built.HasField("timeout") and built.HasField("retry_policy") and built.retry_policy.HasField("delay")
    assert jobs_pb2.Job.FromString(built.SerializeToString()) == jobs_pb2.Job.FromString(expected.SerializeToString())


@EXAMPLES
@given(st.lists(jobs, min_size=1, max_size=4))
def test_the_jobs_of_an_admission_are_what_job_to_proto_makes_of_each(admitted):
    event = JobsAdmitted(tuple(admitted), T0, forced=(admitted[0].id,))
    messages = jobs_messages(recorded(encode(event, "e-1").data, "JobsAdmitted"), TYPES, jobs_pb2.JobTriggered)
    assert [jobs_pb2.JobTriggered.FromString(m.SerializeToString()) for m in messages] == [sent(j) for j in admitted]


def test_an_admission_with_a_job_of_an_older_shape_is_decoded():
    data = json.loads(encode(JobsAdmitted((job(), job(max_run_seconds=5)), T0), "e-1").data)
    del data["jobs"][1]["max_run_seconds"]
    messages = jobs_messages(recorded(json.dumps(data).encode(), "JobsAdmitted"), TYPES, jobs_pb2.JobTriggered)
    assert [jobs_pb2.JobTriggered.FromString(m.SerializeToString()) for m in messages] == [sent(job()), sent(job())]


def test_a_fired_time_job_is_built_from_its_json():
    data = encode(JobTriggered(job(), T0), "e-1").data
    assert event_job_fields(data) is not None
    assert routed(data) == sent(job())


def test_a_job_written_before_one_of_its_fields_was_added_is_decoded():
    data = json.loads(encode(JobTriggered(job(max_run_seconds=5), T0), "e-1").data)
    del data["job"]["max_run_seconds"]
    older = json.dumps(data).encode()
    assert event_job_fields(older) is None
    assert routed(older) == decoded(older) == sent(job())
    del data["job"]["context"]["logical_time"]
    assert event_job_fields(json.dumps(data).encode()) is None


@pytest.mark.parametrize("field, value", [("timeout_policy", "SOMETIMES"), ("priority", "high"), ("priority", 1.5),
                                          ("created_at", 12), ("program", ["ns", "app", "prog"]),
                                          ("constraints", [{"kind": "none"}]), ("spark_conf", {"a": 1})])
def test_a_value_of_another_type_fails_as_decoding_fails(field, value):
    data = json.loads(encode(JobTriggered(job(), T0), "e-1").data)
    hostile = json.dumps({**data, "job": {**data["job"], field: value}}).encode()
    with pytest.raises(Exception) as by_decoding:
        decoded(hostile)
    with pytest.raises(type(by_decoding.value)):
        routed(hostile)


def test_json_orjson_does_not_read_is_decoded():
    assert event_job_fields(b"[1, 2]") is None
    assert event_job_fields(b"{not json") is None
    assert event_job_fields(b'{"job": {"priority": NaN}}') is None
