"""The trigger-matcher's aggregate, one per schedule: its definition and its pending job.

One stream per schedule ("matcher-<schedule id>") gives every schedule's job state a single
writer; the stream holds the matcher's own copy of the definition, so a restarted matcher
rebuilds both from its log."""
from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from sluice.domain.common import Notification, PartitionCommitted
from sluice.domain.jobs import Job, TriggerContext
from sluice.domain.schedules import PartitionTrigger, Schedule
from sluice.ids import derived_id

def stream_name(schedule_id: str) -> str:
    return f"matcher-{schedule_id}"


# Commands
@dataclass(frozen=True)
class ObserveSchedule:
    schedule_id: str
    schedule: Schedule | None  # None: deleted


@dataclass(frozen=True)
class MatchNotification:
    notification: Notification


# Events
@dataclass(frozen=True)
class ScheduleObserved:
    schedule: Schedule
    at: datetime


@dataclass(frozen=True)
class ScheduleForgotten:
    schedule_id: str
    at: datetime


@dataclass(frozen=True)
class JobCreated:
    job_id: str
    schedule_id: str
    generation: int
    at: datetime


@dataclass(frozen=True)
class NotificationMatched:
    job_id: str
    notification: Notification
    at: datetime


@dataclass(frozen=True)
class JobTriggered:
    job: Job
    at: datetime


@dataclass(frozen=True)
class JobDiscarded:
    job_id: str
    schedule_id: str
    reason: str
    at: datetime


EVENTS = (ScheduleObserved, ScheduleForgotten, JobCreated, NotificationMatched, JobTriggered, JobDiscarded)
MatcherEvent = ScheduleObserved | ScheduleForgotten | JobCreated | NotificationMatched | JobTriggered | JobDiscarded


@dataclass(frozen=True)
class PendingJob:
    job_id: str
    created_at: datetime
    notifications: tuple[Notification, ...] = ()


@dataclass(frozen=True)
class MatcherState:
    schedule: Schedule | None = None
    pending: PendingJob | None = None
    jobs_created: int = 0


def decide(state: MatcherState, command: object, now: datetime) -> list[MatcherEvent]:
    match command:
        case ObserveSchedule(schedule_id, None):
            if state.schedule is None:
                return []
            return [*_discard_pending(state, "schedule deleted", now), ScheduleForgotten(schedule_id, now)]
        case ObserveSchedule(_, schedule):
            return _observe(state, schedule, now)
        case MatchNotification(notification):
            return _match(state, notification, now)
    raise TypeError(f"unknown command {command!r}")


def _observe(state: MatcherState, schedule: Schedule, now: datetime) -> list[MatcherEvent]:
    current = state.schedule
    if current == schedule:
        return []
    if current is not None and current.generation != schedule.generation:
        return [*_discard_pending(state, "schedule updated", now), ScheduleObserved(schedule, now)]
    if not schedule.enabled:
        return [*_discard_pending(state, "schedule disabled", now), ScheduleObserved(schedule, now)]
    return [ScheduleObserved(schedule, now)]


def _match(state: MatcherState, notification: Notification, now: datetime) -> list[MatcherEvent]:
    schedule = state.schedule
    if schedule is None or not schedule.enabled:
        return []
    if state.pending is not None and any(n.id == notification.id for n in state.pending.notifications):
        return []
    if not _matches(schedule.trigger, notification):
        return []
    events: list[MatcherEvent] = []
    pending = state.pending
    if pending is None:
        job_id = derived_id("job", schedule.id, str(state.jobs_created + 1))
        pending = PendingJob(job_id, now)
        events.append(JobCreated(job_id, schedule.id, schedule.generation, now))
    events.append(NotificationMatched(pending.job_id, notification, now))
    notifications = (*pending.notifications, notification)
    if _satisfied(schedule.trigger, notifications):
        context = TriggerContext(schedule.id, schedule.name, dict(schedule.properties), notifications)
        job = Job(pending.job_id, schedule.id, schedule.generation, schedule.program, context, pending.created_at,
                  schedule.priority)
        events.append(JobTriggered(job, now))
    return events


def _matches(trigger: PartitionTrigger, notification: Notification) -> bool:
    payload = notification.payload
    return (
        isinstance(payload, PartitionCommitted)
        and payload.namespace == trigger.namespace
        and payload.dataset == trigger.dataset
    )


def _satisfied(trigger: PartitionTrigger, notifications: tuple[Notification, ...]) -> bool:
    return sum(len(n.payload.partitions) for n in notifications) >= trigger.count


def _discard_pending(state: MatcherState, reason: str, now: datetime) -> list[MatcherEvent]:
    if state.pending is None or state.schedule is None:
        return []
    return [JobDiscarded(state.pending.job_id, state.schedule.id, reason, now)]


def evolve(state: MatcherState, event: MatcherEvent) -> MatcherState:
    match event:
        case ScheduleObserved(schedule):
            return replace(state, schedule=schedule)
        case ScheduleForgotten():
            return replace(state, schedule=None, pending=None)
        case JobCreated(job_id, _, _, at):
            return replace(state, pending=PendingJob(job_id, at), jobs_created=state.jobs_created + 1)
        case NotificationMatched(_, notification):
            return replace(state, pending=replace(state.pending, notifications=(*state.pending.notifications, notification)))
        case JobTriggered() | JobDiscarded():
            return replace(state, pending=None)
    raise TypeError(f"unknown event {event!r}")
