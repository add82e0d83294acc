from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from google.protobuf import duration_pb2

from sluice.domain.jobs import Job, JobState, RetryPolicy, TriggerContext, WaitingJobPolicy
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
    program_from_proto,
    program_to_proto,
    timestamp_from_proto,
    timestamp_to_proto,
)


def context_to_proto(context: TriggerContext) -> pb.TriggerContext:
    return pb.TriggerContext(
        schedule_id=context.schedule_id,
        schedule_name=context.schedule_name,
        properties=dict(context.properties),
        notifications=[notification_to_proto(n) for n in context.notifications],
        logical_time=timestamp_to_proto(context.logical_time),
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
    return pb.Job(
        id=job.id,
        schedule_id=job.schedule_id,
        schedule_generation=job.schedule_generation,
        program=program_to_proto(job.program),
        state=pb.JobState.Value(state.value) if state else pb.JOB_STATE_UNSPECIFIED,
        context=context_to_proto(job.context),
        reason=reason,
        created_at=timestamp_to_proto(job.created_at),
        priority=job.priority,
        constraints=[constraint_to_proto(c) for c in job.constraints],
        timeout=duration_pb2.Duration(seconds=job.timeout_seconds),
        timeout_policy=timeout_policy_to_proto(job.timeout_policy),
        sequence=job.sequence,
        triggered_at=timestamp_to_proto(job.triggered_at),
        retry_policy=retry_policy_to_proto(job.retry_policy),
        waiting_job_policy=waiting_job_policy_to_proto(job.waiting_job_policy),
        spark_conf=dict(job.spark_conf),
        max_run_seconds=job.max_run_seconds,
    )


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
