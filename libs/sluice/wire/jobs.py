from __future__ import annotations

from google.protobuf import duration_pb2

from sluice.domain.jobs import Job, JobState, TriggerContext, WaitingJobPolicy
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
    return TriggerContext(
        message.schedule_id,
        message.schedule_name,
        dict(message.properties) if message.properties else {},
        tuple(notification_from_proto(n) for n in message.notifications),
        timestamp_from_proto(message.logical_time, "logical_time") if message.HasField("logical_time") else None,
    )


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
    return Job(
        message.id,
        message.schedule_id,
        message.schedule_generation,
        program_from_proto(message.program),
        context_from_proto(message.context),
        timestamp_from_proto(message.created_at),
        message.priority,
        tuple(constraint_from_proto(c, f"job.constraints[{i}]") for i, c in enumerate(message.constraints)),
        message.timeout.seconds,
        timeout_policy_from_proto(message.timeout_policy),
        message.sequence,
        timestamp_from_proto(message.triggered_at) if message.HasField("triggered_at") else None,
        retry_policy_from_proto(message.retry_policy) if message.HasField("retry_policy") else DEFAULT_RETRY_POLICY,
        waiting_job_policy=_waiting_job_policy(message.waiting_job_policy),
        spark_conf=dict(message.spark_conf) if message.spark_conf else {},
        max_run_seconds=message.max_run_seconds,
    )


def _waiting_job_policy(value: int) -> WaitingJobPolicy:
    """A job's policy from a peer that knows a newer one keeps its job apart (SEPARATE was the behaviour before JOIN)."""
    policy = waiting_job_policy_from_proto(value)
    return policy if isinstance(policy, WaitingJobPolicy) else WaitingJobPolicy.SEPARATE
