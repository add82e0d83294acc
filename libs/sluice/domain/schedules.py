"""The schedule aggregate (owned by the schedule-registry): pure decide/evolve."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Mapping

from sluice.domain import bounds
from sluice.domain.common import ProgramRef
from sluice.domain.constraints import Constraint, TimeoutPolicy, validate_constraints
from sluice.domain.jobs import DEFAULT_RETRY_POLICY, RetryPolicy, WaitingJobPolicy
from sluice.domain.names import validate_name
from sluice.domain.spark_conf import check_schedule_spark_conf
from sluice.domain.triggers import Trigger, validate_trigger
from sluice.ids import derived_id
from sluice.domain.errors import AlreadyExists, InvalidArgument, NotFound


class MisfirePolicy(enum.Enum):
    """What a time-triggered schedule does with fire times that passed while nothing could fire
    them (the matcher was down, or a clock jumped): a fire looked at more than
    `MISFIRE_THRESHOLD` after its time is missed. Every run keeps the logical time it stands for."""

    FIRE_ONCE = "FIRE_ONCE"
    """The default: one run for all the missed times, with the latest missed time as its logical
    time; the schedule then goes on from there (CDAP instead fired none of them)."""
    FIRE_EACH = "FIRE_EACH"
    """One run per missed time, in order, each with its own logical time -- but only for times
    within `catch_up_seconds` before now; older ones are skipped."""
    SKIP = "SKIP"
    """No run for missed times; the schedule fires next at its next time from now on."""


MISFIRE_THRESHOLD = timedelta(seconds=60)
"""A fire handled later than this after its time counts as missed (normal timer lag is far less)."""
DEFAULT_CATCH_UP_SECONDS = 24 * 3600


@dataclass(frozen=True, slots=True)
class Schedule:
    id: str
    name: str
    program: ProgramRef
    trigger: Trigger
    properties: Mapping[str, str] = field(default_factory=dict)
    timeout_seconds: int = 0
    """How long a triggered job may wait for its constraints; 0 waits forever."""
    priority: int = 0
    enabled: bool = False
    generation: int = 1
    description: str = ""
    constraints: tuple[Constraint, ...] = ()
    timeout_policy: TimeoutPolicy = TimeoutPolicy.DISCARD
    misfire_policy: MisfirePolicy = MisfirePolicy.FIRE_ONCE
    catch_up_seconds: int = DEFAULT_CATCH_UP_SECONDS
    """FIRE_EACH: how far back missed fire times are still run."""
    retry_policy: RetryPolicy = DEFAULT_RETRY_POLICY
    """What the launcher does with a run attempt that ends LOST (or FAILED, when configured)."""
    waiting_job_policy: WaitingJobPolicy = WaitingJobPolicy.JOIN
    """What a fire does while an earlier job of the schedule waits for its constraints: join it or not."""
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    """Spark settings of its runs, over the launcher's: resources and tuning only (sluice.domain.spark_conf)."""
    max_run_seconds: int = 0
    """A run going longer is killed by the launcher (ends KILLED); 0: no limit."""
    paused: bool = False
    """Its app or namespace is paused (sluice.domain.apps): it fires nothing, whatever `enabled` says;
    set by the registry only, kept across updates."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "constraints", tuple(self.constraints))
        object.__setattr__(self, "properties", _shared_properties(self.properties))


_PROPERTIES: dict[tuple[tuple[str, str], ...], Mapping[str, str]] = {}
_PROPERTIES_KEPT = 10_000


def _shared_properties(properties: Mapping[str, str]) -> Mapping[str, str]:
    """Equal properties share one mapping (read-only, as the frozen schedule is): many schedules
    carry the same few, and a dict is most of a small schedule's memory."""
    key = tuple(properties.items())
    try:
        shared = _PROPERTIES.get(key)
    except TypeError:  # an unhashable value: validation names it
        return properties
    if shared is None:
        if len(_PROPERTIES) >= _PROPERTIES_KEPT:
            _PROPERTIES.clear()
        shared = _PROPERTIES[key] = dict(properties)
    return shared


def as_observed(schedule: Schedule) -> Schedule:
    """The schedule as the matcher and the checker act on it: a paused one is not enabled there, so
    a pause discards its pending jobs and makes none, like a disable, while `enabled` keeps the
    schedule's own setting for the resume."""
    return replace(schedule, enabled=False) if schedule.paused and schedule.enabled else schedule


def schedule_id_for(program: ProgramRef, name: str) -> str:
    """Schedule names are unique within an app: the id is derived from them, so a second
    create of the same name conflicts on the stream (NO_STREAM) instead of needing an index."""
    return derived_id("schedule", program.namespace, program.app, name)


def stream_name(schedule_id: str) -> str:
    return f"schedule-{schedule_id}"


# Commands
@dataclass(frozen=True)
class CreateSchedule:
    schedule: Schedule


@dataclass(frozen=True)
class UpdateSchedule:
    """Replace the schedule as a new generation: its pending jobs are discarded, trigger state starts over."""

    schedule: Schedule


@dataclass(frozen=True)
class DeleteSchedule:
    schedule_id: str


@dataclass(frozen=True)
class EnableSchedule:
    schedule_id: str


@dataclass(frozen=True)
class PauseSchedule:
    """Its app or namespace was paused (the registry pauses every schedule in it)."""

    schedule_id: str


@dataclass(frozen=True)
class ResumeSchedule:
    """Neither its app nor its namespace is paused any more."""

    schedule_id: str


@dataclass(frozen=True)
class DisableSchedule:
    schedule_id: str


ScheduleCommand = (CreateSchedule | UpdateSchedule | DeleteSchedule | EnableSchedule | DisableSchedule | PauseSchedule
                   | ResumeSchedule)
"""What the aggregate's `decide` takes."""


# Events
@dataclass(frozen=True)
class ScheduleCreated:
    schedule: Schedule
    at: datetime


@dataclass(frozen=True)
class ScheduleUpdated:
    schedule: Schedule
    at: datetime


@dataclass(frozen=True)
class ScheduleDeleted:
    schedule_id: str
    at: datetime


@dataclass(frozen=True)
class ScheduleEnabled:
    schedule_id: str
    at: datetime


@dataclass(frozen=True)
class ScheduleDisabled:
    schedule_id: str
    at: datetime


@dataclass(frozen=True)
class SchedulePaused:
    schedule_id: str
    at: datetime


@dataclass(frozen=True)
class ScheduleResumed:
    schedule_id: str
    at: datetime


EVENTS = (ScheduleCreated, ScheduleUpdated, ScheduleDeleted, ScheduleEnabled, ScheduleDisabled, SchedulePaused,
          ScheduleResumed)
ScheduleEvent = (ScheduleCreated | ScheduleUpdated | ScheduleDeleted | ScheduleEnabled | ScheduleDisabled
                 | SchedulePaused | ScheduleResumed)


@dataclass(frozen=True)
class ScheduleState:
    schedule: Schedule | None = None
    generation: int = 0
    """The generation of the last schedule under this id, kept across deletes."""

    @property
    def exists(self) -> bool:
        return self.schedule is not None


def decide(state: ScheduleState, command: ScheduleCommand, now: datetime) -> list[ScheduleEvent]:
    match command:
        case CreateSchedule(schedule):
            validate(schedule)
            if state.exists:
                raise AlreadyExists(f"schedule {schedule.name!r} already exists in app {schedule.program.app!r}")
            return [ScheduleCreated(replace(schedule, generation=state.generation + 1), now)]
        case UpdateSchedule(schedule):
            validate(schedule)
            current = _require(state, schedule.id)
            replacement = replace(schedule, generation=current.generation + 1, paused=current.paused)
            return [] if replacement == replace(current, generation=current.generation + 1) else [
                ScheduleUpdated(replacement, now)]
        case DeleteSchedule(schedule_id):
            _require(state, schedule_id)
            return [ScheduleDeleted(schedule_id, now)]
        case EnableSchedule(schedule_id):
            schedule = _require(state, schedule_id)
            return [] if schedule.enabled else [ScheduleEnabled(schedule_id, now)]
        case DisableSchedule(schedule_id):
            schedule = _require(state, schedule_id)
            return [ScheduleDisabled(schedule_id, now)] if schedule.enabled else []
        case PauseSchedule(schedule_id):
            schedule = _require(state, schedule_id)
            return [] if schedule.paused else [SchedulePaused(schedule_id, now)]
        case ResumeSchedule(schedule_id):
            schedule = _require(state, schedule_id)
            return [ScheduleResumed(schedule_id, now)] if schedule.paused else []
    raise TypeError(f"unknown command {command!r}")


def evolve(state: ScheduleState, event: ScheduleEvent) -> ScheduleState:
    match event:
        case ScheduleCreated(schedule) | ScheduleUpdated(schedule):
            return ScheduleState(schedule, schedule.generation)
        case ScheduleDeleted():
            return ScheduleState(None, state.generation)
        case ScheduleEnabled():
            return replace(state, schedule=replace(state.schedule, enabled=True))
        case ScheduleDisabled():
            return replace(state, schedule=replace(state.schedule, enabled=False))
        case SchedulePaused():
            return replace(state, schedule=replace(state.schedule, paused=True))
        case ScheduleResumed():
            return replace(state, schedule=replace(state.schedule, paused=False))
    raise TypeError(f"unknown event {event!r}")


def fold(events: list[ScheduleEvent]) -> ScheduleState:
    state = ScheduleState()
    for event in events:
        state = evolve(state, event)
    return state


def _require(state: ScheduleState, schedule_id: str) -> Schedule:
    if state.schedule is None:
        raise NotFound(f"schedule {schedule_id} does not exist")
    return state.schedule


def validate(schedule: Schedule) -> None:
    _require_name("schedule.name", schedule.name)
    _require_name("schedule.program.namespace", schedule.program.namespace)
    _require_name("schedule.program.app", schedule.program.app)
    _require_name("schedule.program.program", schedule.program.program)
    bounds.check_seconds("schedule.timeout", schedule.timeout_seconds, 0)
    bounds.check_int("schedule.priority", schedule.priority, bounds.MIN_PRIORITY, bounds.MAX_PRIORITY)
    _check_properties(schedule.properties)
    bounds.check_text("schedule.description", schedule.description, bounds.MAX_DESCRIPTION_BYTES)
    validate_trigger(schedule.trigger, "schedule.trigger")
    if len(schedule.constraints) > bounds.MAX_CONSTRAINTS:
        raise bounds.ResourceExhausted("schedule.constraints", f"{len(schedule.constraints)} constraints exceed "
                                                               f"the limit of {bounds.MAX_CONSTRAINTS}")
    validate_constraints(schedule.constraints, "schedule.constraints")
    if not isinstance(schedule.timeout_policy, TimeoutPolicy):
        raise InvalidArgument("schedule.timeout_policy", f"must be one of {', '.join(p.value for p in TimeoutPolicy)}")
    if not isinstance(schedule.misfire_policy, MisfirePolicy):
        raise InvalidArgument("schedule.misfire_policy", f"must be one of {', '.join(p.value for p in MisfirePolicy)}")
    if not isinstance(schedule.waiting_job_policy, WaitingJobPolicy):
        raise InvalidArgument("schedule.waiting_job_policy",
                              f"must be one of {', '.join(p.value for p in WaitingJobPolicy)}")
    bounds.check_seconds("schedule.catch_up", schedule.catch_up_seconds, 1)
    validate_retry_policy(schedule.retry_policy, "schedule.retry_policy")
    check_schedule_spark_conf(schedule.spark_conf, "schedule.spark_conf")
    if schedule.max_run_seconds != 0:
        bounds.check_seconds("schedule.max_run_seconds", schedule.max_run_seconds, 1, bounds.MAX_RUN_SECONDS)


def _check_properties(properties: Mapping[str, str]) -> None:
    """At most bounds.MAX_PROPERTIES properties of bounds.MAX_PROPERTIES_BYTES (keys and values,
    UTF-8): a schedule travels in bus messages (jobs, matches) beside other data."""
    if len(properties) > bounds.MAX_PROPERTIES:
        raise bounds.ResourceExhausted("schedule.properties", f"{len(properties)} properties exceed the limit "
                                                              f"of {bounds.MAX_PROPERTIES}")
    size = 0
    for key, value in properties.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidArgument("schedule.properties", f"keys and values must be strings, got {key!r}: {value!r}")
        size += bounds.utf8_size(key) + bounds.utf8_size(value)
        if size > bounds.MAX_PROPERTIES_BYTES:
            raise bounds.ResourceExhausted("schedule.properties", f"over {bounds.MAX_PROPERTIES_BYTES} bytes "
                                           f"(keys and values, UTF-8): exceeds the limit of "
                                           f"{bounds.MAX_PROPERTIES_BYTES} bytes")
    for key, value in properties.items():
        bounds.check_text(f"schedule.properties[{key!r}]", key + value, bounds.MAX_PROPERTIES_BYTES)


def validate_retry_policy(policy: RetryPolicy, path: str) -> None:
    bounds.check_int(f"{path}.max_retries", policy.max_retries, 0, bounds.MAX_RETRIES)
    bounds.check_seconds(f"{path}.delay", policy.delay_seconds, 0)
    if not isinstance(policy.backoff, (int, float)) or not policy.backoff >= 1.0 or policy.backoff > 100:
        raise InvalidArgument(f"{path}.backoff", f"must be between 1 and 100, got {policy.backoff}")


def _require_name(path: str, value: str) -> None:
    validate_name(path, value)  # the identifier rule: sluice.domain.names
