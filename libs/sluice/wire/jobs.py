from __future__ import annotations

import dataclasses
from datetime import datetime
from functools import lru_cache
from typing import Any, TypeVar

from sluice.domain.jobs import Job, JobState, RetryPolicy, TriggerContext, WaitingJobPolicy
from sluice.runtime.errors import MalformedMessage
from sluice.v1 import jobs_pb2 as pb
from sluice.domain.jobs import DEFAULT_RETRY_POLICY
from sluice.wire.schedules import (
    constraint_from_proto,
    constraint_to_proto,
    retry_policy_from_proto,
    retry_policy_to_proto,
    timeout_policy_from_proto,
    timeout_policy_to_proto,
    waiting_job_policy_from_proto,
    waiting_job_policy_to_proto,
)
from sluice.wire.common import (
    notification_from_proto,
    notification_to_proto,
    parse_bus_message,
    program_from_proto,
    timestamp_from_proto,
    timestamp_to_proto,
)


def context_from_proto(message: pb.TriggerContext) -> TriggerContext:
    return _built(TriggerContext, {
        "schedule_id": message.schedule_id,
        "schedule_name": message.schedule_name,
        "properties": dict(message.properties) if message.properties else {},
        "notifications": tuple(notification_from_proto(n) for n in message.notifications) if message.notifications else (),
        "logical_time": timestamp_from_proto(message.logical_time, "logical_time") if message.HasField("logical_time")
        else None,
    })


def job_to_proto(job: Job, state: JobState | None = None, reason: str = "") -> pb.Job:
    return pb.Job(**job_proto_fields(job, state, reason))


def job_proto_fields(job: Job, state: JobState | None = None, reason: str = "") -> dict[str, Any]:
    """job_to_proto's fields as plain values, nested messages as dicts: the constructor builds them in C,
    where building each message in Python and copying it in took most of the time (every fired job is
    encoded; docs/decisions.md). Empty maps and lists are left out, as unset (the encoding is the same)."""
    context, program = job.context, job.program
    trigger = {"schedule_id": context.schedule_id, "schedule_name": context.schedule_name,
               "logical_time": _timestamp(context.logical_time)}
    if context.properties:
        trigger["properties"] = dict(context.properties)
    if context.notifications:
        trigger["notifications"] = [notification_to_proto(n) for n in context.notifications]
    fields = {
        "id": job.id,
        "schedule_id": job.schedule_id,
        "schedule_generation": job.schedule_generation,
        "program": {"namespace": program.namespace, "app": program.app, "program": program.program},
        "context": trigger,
        "created_at": _timestamp(job.created_at),
        "priority": job.priority,
        "timeout": {"seconds": job.timeout_seconds},
        "timeout_policy": timeout_policy_to_proto(job.timeout_policy),
        "sequence": job.sequence,
        "triggered_at": _timestamp(job.triggered_at),
        "retry_policy": _retry_policy_message(job.retry_policy),
        "waiting_job_policy": waiting_job_policy_to_proto(job.waiting_job_policy),
        "max_run_seconds": job.max_run_seconds,
    }
    if state:
        fields["state"] = pb.JobState.Value(state.value)
    if reason:
        fields["reason"] = reason
    if job.constraints:
        fields["constraints"] = [constraint_to_proto(c) for c in job.constraints]
    if job.spark_conf:
        fields["spark_conf"] = dict(job.spark_conf)
    return fields


_TIMESTAMPS: dict[datetime, dict[str, int]] = {}
"""A time -> its Timestamp's fields: a burst of fires shares a few times (the minute, the creation)."""
_TIMESTAMPS_KEPT = 1024


def _timestamp(when: datetime | None) -> dict[str, int] | None:
    if when is None:
        return None
    fields = _TIMESTAMPS.get(when)
    if fields is None:
        stamp = timestamp_to_proto(when)
        if len(_TIMESTAMPS) >= _TIMESTAMPS_KEPT:
            _TIMESTAMPS.clear()
        fields = _TIMESTAMPS[when] = {"seconds": stamp.seconds, "nanos": stamp.nanos}
    return fields


@lru_cache(maxsize=256)  # schedules' settings: few, but not bounded by the code
def _retry_policy_message(policy: RetryPolicy) -> pb.RetryPolicy:
    return retry_policy_to_proto(policy)


def job_from_proto(message: pb.Job) -> Job:
    return _built(Job, {
        "id": message.id,
        "schedule_id": message.schedule_id,
        "schedule_generation": message.schedule_generation,
        "program": program_from_proto(message.program),
        "context": context_from_proto(message.context),
        "created_at": timestamp_from_proto(message.created_at),
        "priority": message.priority,
        "constraints": tuple(constraint_from_proto(c, f"job.constraints[{i}]") for i, c in enumerate(message.constraints))
        if message.constraints else (),
        "timeout_seconds": message.timeout.seconds,
        "timeout_policy": timeout_policy_from_proto(message.timeout_policy),
        "sequence": message.sequence,
        "triggered_at": timestamp_from_proto(message.triggered_at) if message.HasField("triggered_at") else None,
        "retry_policy": _retry_policy(message.retry_policy) if message.HasField("retry_policy") else DEFAULT_RETRY_POLICY,
        "waiting_job_policy": _waiting_job_policy(message.waiting_job_policy),
        "spark_conf": dict(message.spark_conf) if message.spark_conf else {},
        "max_run_seconds": message.max_run_seconds,
    })


def job_triggered(value: bytes) -> Job:
    """The job of a JobTriggered message (a record of the jobs topic); MalformedMessage when it is not one."""
    message = parse_bus_message(pb.JobTriggered, value).job
    if not message.id or not message.schedule_id:
        raise MalformedMessage("job.id and job.schedule_id are required")
    return job_from_proto(message)


T = TypeVar("T")
_FIELDS = {cls: frozenset(f.name for f in dataclasses.fields(cls)) for cls in (Job, TriggerContext)}


def _built(cls: type[T], fields: dict[str, Any]) -> T:
    """cls(**fields) of a frozen dataclass without its __init__, which sets each field through
    object.__setattr__ (most of a parsed job's cost). Job's __post_init__ only makes its constraints
    a tuple, which they are here. Every field is given: a field added to the class and not here is a
    KeyError, not a silently missing value."""
    if fields.keys() != _FIELDS[cls]:
        raise KeyError(f"{cls.__name__} fields {sorted(_FIELDS[cls] ^ fields.keys())} not given or unknown")
    built = object.__new__(cls)
    built.__dict__.update(fields)
    return built


_RETRY_POLICIES: dict[tuple[int, bool, int, float, bool], RetryPolicy] = {}
"""A job's retry policy is its schedule's: the few distinct ones are shared, not made per job."""
_RETRY_POLICIES_KEPT = 256


def _retry_policy(message: pb.RetryPolicy) -> RetryPolicy:
    key = (message.max_retries, message.HasField("delay"), message.delay.seconds, message.backoff, message.retry_failed)
    policy = _RETRY_POLICIES.get(key)
    if policy is None:
        if len(_RETRY_POLICIES) >= _RETRY_POLICIES_KEPT:
            _RETRY_POLICIES.clear()
        policy = _RETRY_POLICIES[key] = retry_policy_from_proto(message)
    return policy


def _waiting_job_policy(value: int) -> WaitingJobPolicy:
    """A job's policy from a peer that knows a newer one keeps its job apart (SEPARATE was the behaviour before JOIN)."""
    policy = waiting_job_policy_from_proto(value)
    return policy if isinstance(policy, WaitingJobPolicy) else WaitingJobPolicy.SEPARATE
