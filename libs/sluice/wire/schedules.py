from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Mapping

from google.protobuf import duration_pb2, unknown_fields

from sluice.domain.constraints import (
    ConcurrencyConstraint,
    Constraint,
    DelayConstraint,
    MaxRunsPerWindowConstraint,
    MinSinceLastRunConstraint,
    NotMetPolicy,
    TimeoutPolicy,
    TimeWindowConstraint,
)
from sluice.domain.jobs import DEFAULT_RETRY_POLICY, RetryPolicy, WaitingJobPolicy
from sluice.domain.observations import ObserveSchedule
from sluice.domain.schedules import DEFAULT_CATCH_UP_SECONDS, MisfirePolicy, Schedule, as_observed, validate
from sluice.domain.triggers import (
    AndTrigger,
    DataSizeTrigger,
    ElapsedTrigger,
    OrTrigger,
    PartitionTrigger,
    ProgramStatusTrigger,
    QuietPeriodTrigger,
    TimeTrigger,
    Trigger,
)
from sluice.domain.errors import InvalidArgument
from sluice.runtime.errors import MalformedMessage
from sluice.v1 import notifications_pb2 as npb, schedules_pb2 as pb
from sluice.wire.common import parse_bus_message, program_from_proto, program_to_proto

if TYPE_CHECKING:
    from sluice.bus.port import Record


def schedule_to_proto(schedule: Schedule) -> pb.Schedule:
    return pb.Schedule(
        id=schedule.id,
        name=schedule.name,
        program=program_to_proto(schedule.program),
        properties=dict(schedule.properties),
        trigger=trigger_to_proto(schedule.trigger),
        timeout=duration_pb2.Duration(seconds=schedule.timeout_seconds),
        priority=schedule.priority,
        enabled=schedule.enabled,
        generation=schedule.generation,
        description=schedule.description,
        constraints=[constraint_to_proto(c) for c in schedule.constraints],
        timeout_policy=timeout_policy_to_proto(schedule.timeout_policy),
        misfire_policy=pb.MisfirePolicy.Value(f"MISFIRE_{schedule.misfire_policy.value}"),
        catch_up=duration_pb2.Duration(seconds=schedule.catch_up_seconds),
        retry_policy=retry_policy_to_proto(schedule.retry_policy),
        waiting_job_policy=waiting_job_policy_to_proto(schedule.waiting_job_policy),
        spark_conf=dict(schedule.spark_conf),
        max_run_seconds=schedule.max_run_seconds,
        paused=schedule.paused,
    )


def schedule_from_proto(message: pb.Schedule, schedule_id: str, path: str = "schedule") -> Schedule:
    """Convert a client's schedule; the result is validated and InvalidArgument names the field."""
    schedule = Schedule(
        id=schedule_id,
        name=message.name,
        program=program_from_proto(message.program),
        trigger=trigger_from_proto(message.trigger, f"{path}.trigger"),
        properties=dict(message.properties),
        timeout_seconds=message.timeout.seconds,
        priority=message.priority,
        enabled=message.enabled,
        generation=message.generation,
        description=message.description,
        constraints=tuple(constraint_from_proto(c, f"{path}.constraints[{i}]") for i, c in enumerate(message.constraints)),
        timeout_policy=timeout_policy_from_proto(message.timeout_policy),
        misfire_policy=_misfire_from_proto(message.misfire_policy),
        catch_up_seconds=message.catch_up.seconds if message.HasField("catch_up") else DEFAULT_CATCH_UP_SECONDS,
        retry_policy=retry_policy_from_proto(message.retry_policy) if message.HasField("retry_policy")
        else DEFAULT_RETRY_POLICY,
        waiting_job_policy=waiting_job_policy_from_proto(message.waiting_job_policy),
        spark_conf=dict(message.spark_conf),
        max_run_seconds=message.max_run_seconds,
        paused=message.paused,
    )
    try:
        validate(schedule)
    except InvalidArgument as error:
        raise type(error)(error.field.replace("schedule", path, 1), error.message) from error
    return schedule


def trigger_to_proto(trigger: Trigger) -> pb.Trigger:
    match trigger:
        case PartitionTrigger(namespace, dataset, count, filter):
            return pb.Trigger(partition=pb.PartitionTrigger(namespace=namespace, dataset=dataset, count=count,
                                                            filter=_filter_to_proto(filter)))
        case TimeTrigger(cron, zone):
            return pb.Trigger(time=pb.TimeTrigger(cron=cron, zone=zone))
        case DataSizeTrigger(namespace, dataset, min_bytes, filter):
            return pb.Trigger(data_size=pb.DataSizeTrigger(namespace=namespace, dataset=dataset, min_bytes=min_bytes,
                                                           filter=_filter_to_proto(filter)))
        case ProgramStatusTrigger(namespace, app, program, statuses, count):
            return pb.Trigger(program_status=pb.ProgramStatusTrigger(
                namespace=namespace, app=app, program=program,
                statuses=[npb.RunStatus.Value(s) for s in statuses], count=count))
        case QuietPeriodTrigger(namespace, dataset, quiet_seconds, filter):
            return pb.Trigger(quiet_period=pb.QuietPeriodTrigger(namespace=namespace, dataset=dataset,
                                                                 quiet_seconds=quiet_seconds,
                                                                 filter=_filter_to_proto(filter)))
        case ElapsedTrigger(seconds):
            return pb.Trigger(elapsed=pb.ElapsedTrigger(seconds=seconds))
        case AndTrigger(all_of):
            return pb.Trigger(**{"and": pb.AndTrigger(all_of=[trigger_to_proto(t) for t in all_of])})
        case OrTrigger(any_of):
            return pb.Trigger(**{"or": pb.OrTrigger(any_of=[trigger_to_proto(t) for t in any_of])})
    raise TypeError(f"unknown trigger {trigger!r}")


def _status_name(number: int, path: str) -> str:
    if number not in npb.RunStatus.values():
        raise InvalidArgument(path, f"unknown run status {number} (COMPLETED, FAILED or KILLED)")
    return npb.RunStatus.Name(number)


def trigger_from_proto(message: pb.Trigger, path: str) -> Trigger:
    """The domain trigger; it is validated with the schedule (InvalidArgument names the field)."""
    kind = message.WhichOneof("kind")
    value = getattr(message, kind) if kind else None
    match kind:
        case "partition":
            return PartitionTrigger(sys.intern(value.namespace), sys.intern(value.dataset), value.count,
                                    _filter_from_proto(value.filter))  # interned: many schedules per dataset
        case "time":
            return TimeTrigger(value.cron, value.zone or "UTC")
        case "data_size":
            return DataSizeTrigger(value.namespace, value.dataset, value.min_bytes, _filter_from_proto(value.filter))
        case "program_status":
            statuses = tuple(_status_name(s, f"{path}.program_status.statuses[{i}]") for i, s in enumerate(value.statuses))
            return ProgramStatusTrigger(value.namespace, value.app, value.program, statuses, value.count)
        case "quiet_period":
            return QuietPeriodTrigger(value.namespace, value.dataset, value.quiet_seconds,
                                      _filter_from_proto(value.filter))
        case "elapsed":
            return ElapsedTrigger(value.seconds)
        case "and":
            return AndTrigger(tuple(trigger_from_proto(t, f"{path}.and.all_of[{i}]") for i, t in enumerate(value.all_of)))
        case "or":
            return OrTrigger(tuple(trigger_from_proto(t, f"{path}.or.any_of[{i}]") for i, t in enumerate(value.any_of)))
    if len(unknown_fields.UnknownFieldSet(message)):
        raise InvalidArgument(path, f"unknown trigger type (supported: {', '.join(KINDS)})")
    raise InvalidArgument(path, f"a trigger is required (one of: {', '.join(KINDS)})")


KINDS = ("partition", "time", "data_size", "program_status", "quiet_period", "elapsed", "and", "or")


def _filter_to_proto(filter: Mapping[str, tuple[str, ...]]) -> dict[str, pb.AllowedValues]:
    return {key: pb.AllowedValues(values=list(values)) for key, values in filter.items()}


def _filter_from_proto(filter) -> dict[str, tuple[str, ...]]:
    return {key: tuple(allowed.values) for key, allowed in filter.items()}


def _misfire_from_proto(value: int) -> MisfirePolicy:
    if value not in pb.MisfirePolicy.values():
        return value  # left for validation to reject with the field's name
    return MisfirePolicy(pb.MisfirePolicy.Name(value).removeprefix("MISFIRE_"))


def waiting_job_policy_to_proto(policy: WaitingJobPolicy) -> int:
    return pb.WaitingJobPolicy.Value(f"WAITING_JOB_{policy.value}")


_WAITING_JOB_POLICIES = {waiting_job_policy_to_proto(p): p for p in WaitingJobPolicy}


def waiting_job_policy_from_proto(value: int) -> WaitingJobPolicy:
    """An unknown number stays a number, for validation to reject with the field's name."""
    return _WAITING_JOB_POLICIES.get(value, value)


def retry_policy_to_proto(policy: RetryPolicy) -> pb.RetryPolicy:
    return pb.RetryPolicy(max_retries=policy.max_retries, delay=duration_pb2.Duration(seconds=policy.delay_seconds),
                          backoff=policy.backoff, retry_failed=policy.retry_failed)


def retry_policy_from_proto(message: pb.RetryPolicy) -> RetryPolicy:
    """Unset delay and backoff take the defaults; the values are validated with the schedule."""
    policy = RetryPolicy(
        max_retries=message.max_retries,
        delay_seconds=message.delay.seconds if message.HasField("delay") else DEFAULT_RETRY_POLICY.delay_seconds,
        backoff=message.backoff or DEFAULT_RETRY_POLICY.backoff,
        retry_failed=message.retry_failed,
    )
    return DEFAULT_RETRY_POLICY if policy == DEFAULT_RETRY_POLICY else policy  # one object for the many defaults


def timeout_policy_to_proto(policy: TimeoutPolicy) -> int:
    return pb.TimeoutPolicy.Value(f"TIMEOUT_{policy.value}")


_TIMEOUT_POLICIES = {timeout_policy_to_proto(p): p for p in TimeoutPolicy}


def timeout_policy_from_proto(value: int) -> TimeoutPolicy:
    """An unknown number stays a number, for validation to reject with the field's name."""
    return _TIMEOUT_POLICIES.get(value, value)


def constraint_to_proto(constraint: Constraint) -> pb.Constraint:
    on_not_met = pb.NotMetPolicy.Value(f"NOT_MET_{constraint.on_not_met.value}")
    match constraint:
        case ConcurrencyConstraint(max_running, group):
            return pb.Constraint(concurrency=pb.ConcurrencyConstraint(max_running=max_running, group=group),
                                 on_not_met=on_not_met)
        case DelayConstraint(seconds):
            return pb.Constraint(delay=pb.DelayConstraint(seconds=seconds), on_not_met=on_not_met)
        case TimeWindowConstraint(start, end, zone):
            return pb.Constraint(time_window=pb.TimeWindowConstraint(start=start, end=end, zone=zone),
                                 on_not_met=on_not_met)
        case MinSinceLastRunConstraint(min_seconds):
            return pb.Constraint(min_since_last_run=pb.MinSinceLastRunConstraint(min_seconds=min_seconds),
                                 on_not_met=on_not_met)
        case MaxRunsPerWindowConstraint(max_runs, unit, zone):
            return pb.Constraint(max_runs_per_window=pb.MaxRunsPerWindowConstraint(max_runs=max_runs, unit=unit,
                                                                                   zone=zone),
                                 on_not_met=on_not_met)
    raise TypeError(f"unknown constraint {constraint!r}")


def constraint_from_proto(message: pb.Constraint, path: str) -> Constraint:
    """The domain constraint; it is validated with the schedule (InvalidArgument names the field)."""
    kind = message.WhichOneof("kind")
    value = getattr(message, kind) if kind else None
    on_not_met = NotMetPolicy(pb.NotMetPolicy.Name(message.on_not_met).removeprefix("NOT_MET_")) \
        if message.on_not_met in pb.NotMetPolicy.values() else message.on_not_met
    match kind:
        case "concurrency":
            return ConcurrencyConstraint(value.max_running, value.group, on_not_met)
        case "delay":
            return DelayConstraint(value.seconds, on_not_met)
        case "time_window":
            return TimeWindowConstraint(value.start, value.end, value.zone or "UTC", on_not_met)
        case "min_since_last_run":
            return MinSinceLastRunConstraint(value.min_seconds, on_not_met)
        case "max_runs_per_window":
            return MaxRunsPerWindowConstraint(value.max_runs, value.unit or "day", value.zone or "UTC", on_not_met)
    raise InvalidArgument(path, f"a constraint kind is required (one of: {', '.join(CONSTRAINT_KINDS)})")


CONSTRAINT_KINDS = ("concurrency", "delay", "time_window", "min_since_last_run", "max_runs_per_window")


def parse_schedule_change(record: Record) -> ObserveSchedule:
    """A ScheduleChanged message of the schedules topic as the command the matcher's and the
    checker's aggregates take (MalformedMessage / InvalidArgument: dead-lettered by the consumer loop)."""
    change = parse_bus_message(pb.ScheduleChanged, record.value)
    if not change.schedule_id:
        raise MalformedMessage("schedule_id: must not be empty")
    schedule = None if change.deleted else as_observed(schedule_from_proto(change.schedule, change.schedule_id))
    return ObserveSchedule(change.schedule_id, schedule)
