"""The trigger-matcher's aggregate, one per schedule: its definition and its pending job.

One stream per schedule ("matcher-<schedule id>") gives every schedule's job state a single
writer; the stream holds the matcher's own copy of the definition, so a restarted matcher
rebuilds both from its log. (The service appends these streams' events in batches, one record
per matches partition: sluice.eventlog.batched.)"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from sluice.domain import triggers
from sluice.domain.bounds import JOB_NOTIFICATIONS_BYTES, MAX_CATCH_UP_FIRES, notification_bytes
from sluice.domain.common import Notification
from sluice.domain.jobs import Job, TriggerContext
from sluice.domain.observations import CheckTime, ObserveSchedule
from sluice.domain.schedules import MISFIRE_THRESHOLD, MisfirePolicy, Schedule
from sluice.domain.triggers import DataSizeTrigger, PartitionTrigger, ProgramStatusTrigger, TriggerState
from sluice.ids import derived_id


def stream_name(schedule_id: str) -> str:
    return f"matcher-{schedule_id}"


# Commands
@dataclass(frozen=True)
class MatchNotification:
    notification: Notification


MatcherCommand = ObserveSchedule | MatchNotification | CheckTime
"""What the aggregate's `decide` takes."""


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
    waiting_since: datetime | None = None
    """When the job's trigger started counting time (a cron window's start); `at` when absent."""


@dataclass(frozen=True)
class NotificationMatched:
    job_id: str
    notification: Notification
    at: datetime
    schedule_id: str = ""
    """Set (the job's schedule) when this notification created the job: the event stands for the
    JobCreated before it, one event instead of two."""


@dataclass(frozen=True)
class JobTriggered:
    """The pending job's trigger is satisfied. Without a JobCreated before it, the job was created,
    matched its only notification (`job.context`) and fired at once: one event instead of three."""

    job: Job
    at: datetime
    notification_id: str = ""
    """The notification this decision matched, when it fired the pending job: it is in
    `job.context`, and the event stands for the NotificationMatched before it."""
    next_job_id: str = ""
    """The schedule's next job, when it starts waiting for time at once (`_then_wait_for_time`):
    the event stands for the JobCreated after it, whose `waiting_since` is `next_waiting_since`."""
    next_waiting_since: datetime | None = None
    part_of: str = ""
    """Set (the first job's id) when one fire made several jobs, their notifications too many bytes for
    one (bounds.JOB_NOTIFICATIONS_BYTES): this job is a further part, created by the fire with the next
    sequence; its notifications were matched by the first's events."""


@dataclass(frozen=True)
class MissedFiresSkipped:
    """The misfire policy moved the pending job's time window on: fire times up to `until` are skipped."""

    job_id: str
    until: datetime
    policy: MisfirePolicy
    at: datetime


@dataclass(frozen=True)
class JobDiscarded:
    job_id: str
    schedule_id: str
    reason: str
    at: datetime


EVENTS = (ScheduleObserved, ScheduleForgotten, JobCreated, NotificationMatched, JobTriggered, MissedFiresSkipped,
          JobDiscarded)
MatcherEvent = (ScheduleObserved | ScheduleForgotten | JobCreated | NotificationMatched | JobTriggered
                | MissedFiresSkipped | JobDiscarded)


@dataclass(frozen=True, slots=True)
class PendingJob:
    job_id: str
    created_at: datetime
    trigger: TriggerState
    sequence: int
    """The job's number within its schedule (1, 2, ...): jobs reach the checker in this order."""


@dataclass(frozen=True, slots=True)
class MatcherState:
    schedule: Schedule | None = None
    pending: PendingJob | None = None
    jobs_created: int = 0
    retired_generation: int = 0
    """The generation of the schedule when it was deleted: a change up to it arrives too late."""
    recent: bytes = b""
    """Digests (`notification_digest`) of the last notifications this schedule matched, newest
    last: one a producer sends again (same id) is ignored even after its job fired. Digests, not
    ids: 8 bytes instead of ~90 each. (What the bus or the first stage delivers again is ignored
    before it gets here, by the recorded offsets.)"""


RECENT_PER_SCHEDULE = 16
"""A producer's resend is recent: the schedule's last 16 matches. Kept small, it is most of a
schedule's memory in the matcher."""
DIGEST_SIZE = 8
"""64-bit digests: two of a schedule's last 16 ids collide with a probability of ~2**-57."""
_RECENT_BYTES = RECENT_PER_SCHEDULE * DIGEST_SIZE


def notification_digest(notification_id: str) -> bytes:
    return hashlib.blake2b(notification_id.encode(), digest_size=DIGEST_SIZE).digest()


def matched_recently(state: MatcherState, notification_id: str) -> bool:
    return _seen(state.recent, notification_digest(notification_id))


def _seen(recent: bytes, digest: bytes) -> bool:
    found = recent.find(digest)
    while found != -1 and found % DIGEST_SIZE:  # a match straddling two digests is no match
        found = recent.find(digest, found + 1)
    return found != -1


def decide(state: MatcherState, command: MatcherCommand, now: datetime) -> list[MatcherEvent]:
    return step(state, command, now)[0]


def step(state: MatcherState, command: MatcherCommand, now: datetime) -> tuple[list[MatcherEvent], MatcherState]:
    """`decide`, with the state its events lead to (what folding `evolve` over them gives),
    worked out once: the matcher's hot path neither evolves twice nor observes a notification twice."""
    match command:
        case MatchNotification(notification):
            events, after = _match(state, notification, now)
            return _then_wait_for_time(events, after, now)
        case ObserveSchedule(schedule_id, None):
            if state.schedule is None:
                return [], state
            return _folded(state, [*_discard_pending(state, "schedule deleted", now), ScheduleForgotten(schedule_id, now)])
        case ObserveSchedule(_, schedule):
            if schedule.generation <= state.retired_generation or (
                    state.schedule is not None and schedule.generation < state.schedule.generation):
                return [], state  # a change delivered after a newer one
            return _then_wait_for_time(*_folded(state, _observe(state, schedule, now)), now)
        case CheckTime():
            return _check_time(state, now)
    raise TypeError(f"unknown command {command!r}")


def _folded(state: MatcherState, events: list[MatcherEvent]) -> tuple[list[MatcherEvent], MatcherState]:
    for event in events:
        state = evolve(state, event)
    return events, state


def wake_at(state: MatcherState, now: datetime) -> datetime | None:
    """When the pending job's trigger may become satisfied by time alone: the matcher's one timer.
    A trigger already satisfied (time passed while the matcher was down) is due now."""
    if state.pending is None or state.schedule is None or not state.schedule.enabled:
        return None
    if type(state.schedule.trigger) is triggers.TimeTrigger:  # a cron alone (most timers): evaluate's own answer
        fire = triggers.next_fire(state.schedule.trigger, state.pending.trigger.started_at)
        return now if fire <= now else fire
    if _untimed(state.schedule.trigger):
        return None  # satisfied only by a notification, and then fired in the same decision
    evaluation = triggers.evaluate(state.schedule.trigger, state.pending.trigger, now)
    return now if evaluation.satisfied else evaluation.wake_at


_UNTIMED_LEAVES = (PartitionTrigger, DataSizeTrigger, ProgramStatusTrigger)
_TIMED_LEAVES = (triggers.TimeTrigger, triggers.ElapsedTrigger)


def _untimed(trigger: triggers.Trigger) -> bool:
    """Only notifications count towards it (no cron, elapsed or quiet-period leaf, however combined)."""
    kind = type(trigger)
    if kind in _UNTIMED_LEAVES:
        return True
    if kind in _TIMED_LEAVES:
        return False
    return all(isinstance(leaf, _UNTIMED_LEAVES) for leaf in triggers.leaves(trigger))


def _observe(state: MatcherState, schedule: Schedule, now: datetime) -> list[MatcherEvent]:
    current = state.schedule
    if current == schedule:
        return []
    if current is not None and current.generation != schedule.generation:
        return [*_discard_pending(state, "schedule updated", now), ScheduleObserved(schedule, now)]
    if not schedule.enabled:
        return [*_discard_pending(state, "schedule disabled", now), ScheduleObserved(schedule, now)]
    return [ScheduleObserved(schedule, now)]


def _match(state: MatcherState, notification: Notification,
           now: datetime) -> tuple[list[MatcherEvent], MatcherState]:
    """The events, and the state after them: the same as `evolve` makes of them, built directly."""
    schedule = state.schedule
    if schedule is None or not schedule.enabled:
        return [], state
    digest = notification_digest(notification.id)
    if _seen(state.recent, digest):
        return [], state
    pending, jobs_created = state.pending, state.jobs_created
    created = pending is None
    if created:
        jobs_created += 1
        job_id = derived_id("job", schedule.id, str(jobs_created))
        pending = PendingJob(job_id, now, triggers.start(schedule.trigger, now), jobs_created)
    observed = triggers.observe(schedule.trigger, pending.trigger, notification, now)
    if observed is pending.trigger:
        return [], state  # not for this trigger, or already counted
    matched = NotificationMatched(pending.job_id, notification, now, schedule.id if created else "")
    pending = PendingJob(pending.job_id, pending.created_at, observed, pending.sequence)
    fired = _fire_if_satisfied(schedule, pending, jobs_created, now)
    events: list[MatcherEvent]
    if not fired:
        events = [matched]
    elif len(fired) > 1:  # a fire cut in parts: the match first, then each part
        events = [matched, *fired]
        jobs_created = fired[-1].job.sequence
    elif created:
        # created, matched and fired by this one notification: the fire says it all
        events = fired if fired[0].job.context.notifications == (notification,) else [matched, *fired]
    elif notification in fired[0].job.context.notifications:
        events = [JobTriggered(fired[0].job, now, notification.id)]  # the fire says which it matched
    else:
        events = [matched, *fired]
    recent = state.recent[-(_RECENT_BYTES - DIGEST_SIZE):] + digest
    return events, MatcherState(schedule, None if fired else pending, jobs_created, state.retired_generation, recent)


def _check_time(state: MatcherState, now: datetime) -> tuple[list[MatcherEvent], MatcherState]:
    """The events of a timer's check, and the state after them (the next job waiting for time
    included), built directly: a fire is one JobTriggered naming the next job."""
    schedule, pending = state.schedule, state.pending
    if schedule is None or not schedule.enabled:
        return [], state
    if pending is None:
        return _then_wait_for_time([], state, now)
    evaluation = triggers.evaluate(schedule.trigger, pending.trigger, now)
    if not evaluation.satisfied:
        return [], state
    first_missed = evaluation.logical_time
    if first_missed is not None and now - first_missed > MISFIRE_THRESHOLD:
        until = _skip_missed_until(schedule, pending.trigger.started_at, first_missed, now)
        if until is not None:
            skipped = MissedFiresSkipped(pending.job_id, until, schedule.misfire_policy, now)
            moved = replace(pending, trigger=replace(pending.trigger, started_at=until))
            fired = _fire_if_satisfied(schedule, moved, state.jobs_created, now)
            return _then_wait_for_time(*_folded(state, [skipped, *fired]), now)
    job = _fired_job(schedule, pending, now, evaluation.logical_time)
    if len(job.context.notifications) > 1 and len(parts := _cut_by_size(job.context.notifications)) > 1:
        return _then_wait_for_time(*_folded(state, _fired_in_parts(schedule, pending, state.jobs_created, job, parts)),
                                   now)
    if not _waits_for_time(schedule.trigger):  # what evolve makes of the fire of the pending job
        return [JobTriggered(job, now)], MatcherState(schedule, None, state.jobs_created, state.retired_generation,
                                                      state.recent)
    since = evaluation.logical_time or now
    job_id, waiting = _next_waiting(state, since, now)
    return [JobTriggered(job, now, "", job_id, since)], waiting


def _skip_missed_until(schedule: Schedule, started_at: datetime, first_missed: datetime,
                       now: datetime) -> datetime | None:
    """Where the misfire policy restarts the job's time window (fires after it count), or None to
    fire the first missed time as it is."""
    match schedule.misfire_policy:
        case MisfirePolicy.FIRE_ONCE:
            latest = triggers.latest_fire(schedule.trigger, started_at, now)
            return latest - timedelta(seconds=1) if latest is not None and latest > first_missed else None
        case MisfirePolicy.FIRE_EACH:
            horizon = now - timedelta(seconds=schedule.catch_up_seconds)
            # at most MAX_CATCH_UP_FIRES runs (per time leaf): the newest of the missed times
            oldest_kept = triggers.nth_latest_fire(schedule.trigger, max(horizon, started_at), now,
                                                   MAX_CATCH_UP_FIRES + 1)
            if oldest_kept is not None:
                horizon = max(horizon, oldest_kept)
            return horizon if first_missed <= horizon else None
        case MisfirePolicy.SKIP:
            return now - MISFIRE_THRESHOLD
    raise TypeError(f"unknown misfire policy {schedule.misfire_policy!r}")


def _fire_if_satisfied(schedule: Schedule, pending: PendingJob, jobs_created: int, now: datetime,
                       evaluation: triggers.Evaluation | None = None) -> list[JobTriggered]:
    """`evaluation`: the trigger's at `now` for this very pending job, when the caller has it.
    `jobs_created`: the schedule's, a further part of the fire takes the next sequence."""
    if evaluation is None:
        evaluation = triggers.evaluate(schedule.trigger, pending.trigger, now)
    if not evaluation.satisfied:
        return []
    job = _fired_job(schedule, pending, now, evaluation.logical_time)
    if len(job.context.notifications) > 1 and len(parts := _cut_by_size(job.context.notifications)) > 1:
        return _fired_in_parts(schedule, pending, jobs_created, job, parts)
    return [JobTriggered(job, now)]


def _cut_by_size(notifications: tuple[Notification, ...]) -> list[tuple[Notification, ...]]:
    """`notifications` in runs, in order, each within a job's budget (bounds.JOB_NOTIFICATIONS_BYTES;
    one alone always fits its message): one run when they all fit."""
    parts: list[tuple[Notification, ...]] = []
    start = size = 0
    for index, notification in enumerate(notifications):
        notification_size = notification_bytes(notification)
        if index > start and size + notification_size > JOB_NOTIFICATIONS_BYTES:
            parts.append(notifications[start:index])
            start, size = index, 0
        size += notification_size
    parts.append(notifications[start:])
    return parts


def _fired_in_parts(schedule: Schedule, pending: PendingJob, jobs_created: int, job: Job,
                    parts: list[tuple[Notification, ...]]) -> list[JobTriggered]:
    """The fire of `job` as one job per part of its notifications, at the same moment with the same
    logical time: the pending job with the first, then jobs the fire creates, with the schedule's next
    sequences and ids derived from them as every job's (created when the pending job was: their
    notifications waited with it)."""
    fired = [JobTriggered(replace(job, context=replace(job.context, notifications=parts[0])), job.triggered_at)]
    for sequence, notifications in enumerate(parts[1:], jobs_created + 1):
        part = replace(job, id=derived_id("job", schedule.id, str(sequence)), sequence=sequence,
                       context=replace(job.context, notifications=notifications))
        fired.append(JobTriggered(part, job.triggered_at, part_of=pending.job_id))
    return fired


_new, _set = object.__new__, object.__setattr__


def _fired_job(schedule: Schedule, pending: PendingJob, now: datetime, logical_time: datetime | None) -> Job:
    """Job(...) of the pending job's fire, and its TriggerContext, built without their frozen
    __init__ (which sets each field through object.__setattr__: most of a fire's cost). Every field
    is given (tests/unit/test_matching_fast_paths.py compares it with the constructor's); the
    schedule's constraints are a tuple already, as Job's __post_init__ would make them."""
    context = _new(TriggerContext)
    _set(context, "__dict__", {
        "schedule_id": schedule.id, "schedule_name": schedule.name, "properties": dict(schedule.properties),
        "notifications": triggers.matched_notifications(schedule.trigger, pending.trigger),
        "logical_time": logical_time})
    job = _new(Job)
    _set(job, "__dict__", {
        "id": pending.job_id, "schedule_id": schedule.id, "schedule_generation": schedule.generation,
        "program": schedule.program, "context": context, "created_at": pending.created_at,
        "priority": schedule.priority, "constraints": schedule.constraints,
        "timeout_seconds": schedule.timeout_seconds, "timeout_policy": schedule.timeout_policy,
        "sequence": pending.sequence, "triggered_at": now, "retry_policy": schedule.retry_policy,
        "waiting_job_policy": schedule.waiting_job_policy, "spark_conf": schedule.spark_conf,
        "max_run_seconds": schedule.max_run_seconds})
    return job


def _then_wait_for_time(events: list[MatcherEvent], after: MatcherState,
                        now: datetime) -> tuple[list[MatcherEvent], MatcherState]:
    """A schedule whose trigger time alone can satisfy (cron, elapsed) always has a job waiting:
    from the moment it is enabled, and again right after each fire. The next job's time window
    starts at the fire it follows, so no cron fire is skipped. `after`: the state after `events`;
    the state returned is what evolve makes of the JobCreated (or the fire naming the next job)."""
    schedule = after.schedule
    if schedule is None or not schedule.enabled or after.pending is not None:
        return events, after
    if not _waits_for_time(schedule.trigger):
        return events, after
    fired = next((e for e in reversed(events) if isinstance(e, JobTriggered)), None)
    since = (fired.job.context.logical_time or now) if fired else now
    job_id, waiting = _next_waiting(after, since, now)
    if events and events[-1] is fired:  # the fire says which job waits next: one event
        return [*events[:-1], JobTriggered(fired.job, fired.at, fired.notification_id, job_id, since,
                                           fired.part_of)], waiting
    return [*events, JobCreated(job_id, schedule.id, schedule.generation, now, waiting_since=since)], waiting


def _next_waiting(state: MatcherState, since: datetime, now: datetime) -> tuple[str, MatcherState]:
    """The schedule's next job, created at `now` and waiting for time from `since`, and the state
    with it pending: what evolve makes of its JobCreated (`state`: with no job pending)."""
    schedule, sequence = state.schedule, state.jobs_created + 1
    job_id = derived_id("job", schedule.id, str(sequence))
    return job_id, MatcherState(schedule, PendingJob(job_id, now, triggers.start(schedule.trigger, since), sequence),
                                sequence, state.retired_generation, state.recent)


def _waits_for_time(trigger: triggers.Trigger) -> bool:
    """`time_alone_can_satisfy`, without its walk for a single leaf (every schedule's decision asks)."""
    kind = type(trigger)
    if kind in _TIMED_LEAVES:
        return True
    if kind in _UNTIMED_LEAVES:
        return False
    return triggers.time_alone_can_satisfy(trigger)


def _discard_pending(state: MatcherState, reason: str, now: datetime) -> list[MatcherEvent]:
    if state.pending is None or state.schedule is None:
        return []
    return [JobDiscarded(state.pending.job_id, state.schedule.id, reason, now)]


def evolve(state: MatcherState, event: MatcherEvent) -> MatcherState:
    match event:
        case ScheduleObserved(schedule):
            return replace(state, schedule=schedule)
        case ScheduleForgotten():
            return replace(state, schedule=None, pending=None, retired_generation=state.schedule.generation)
        case JobCreated(job_id, _, _, at, waiting_since):
            pending = PendingJob(job_id, at, triggers.start(state.schedule.trigger, waiting_since or at),
                                 state.jobs_created + 1)
            return MatcherState(state.schedule, pending, state.jobs_created + 1, state.retired_generation,
                                state.recent)
        case NotificationMatched(job_id, notification, at, schedule_id):
            pending, jobs_created = state.pending, state.jobs_created
            if schedule_id:  # the job's first notification created it
                jobs_created += 1
                pending = PendingJob(job_id, at, triggers.start(state.schedule.trigger, at), jobs_created)
            observed = triggers.observe(state.schedule.trigger, pending.trigger, notification, at)
            recent = state.recent[-(_RECENT_BYTES - DIGEST_SIZE):] + notification_digest(notification.id)
            return MatcherState(state.schedule, PendingJob(pending.job_id, pending.created_at, observed,
                                                           pending.sequence),
                                jobs_created, state.retired_generation, recent)
        case MissedFiresSkipped(_, until):
            return replace(state, pending=replace(state.pending, trigger=replace(state.pending.trigger, started_at=until)))
        case JobTriggered(_, at, _, next_job_id, waiting_since) if next_job_id:
            fired = evolve(state, replace(event, next_job_id=""))
            return evolve(fired, JobCreated(next_job_id, state.schedule.id, state.schedule.generation, at, waiting_since))
        case JobTriggered(job, part_of=part_of) if part_of:  # its notifications counted by the fire's first part
            return MatcherState(state.schedule, None, max(state.jobs_created, job.sequence), state.retired_generation,
                                state.recent)
        case JobTriggered(job) if state.pending is None or state.pending.job_id != job.id:
            return _fired_at_creation(state, job)
        case JobTriggered(_, _, notification_id) if notification_id:
            recent = state.recent[-(_RECENT_BYTES - DIGEST_SIZE):] + notification_digest(notification_id)
            return MatcherState(state.schedule, None, state.jobs_created, state.retired_generation, recent)
        case JobTriggered() | JobDiscarded():
            return MatcherState(state.schedule, None, state.jobs_created, state.retired_generation, state.recent)
    raise TypeError(f"unknown event {event!r}")


def _fired_at_creation(state: MatcherState, job: Job) -> MatcherState:
    """A JobTriggered with no JobCreated before it: the job was created, matched its only
    notification and fired in one decision (`_match` records just the fire)."""
    recent = state.recent
    for notification in job.context.notifications:
        recent = recent[-(_RECENT_BYTES - DIGEST_SIZE):] + notification_digest(notification.id)
    return replace(state, pending=None, jobs_created=job.sequence, recent=recent)
