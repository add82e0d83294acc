"""The constraint-checker's aggregate: the queue of triggered jobs waiting for their run
constraints, and the world of runs they are checked against.

One stream ("checker-queue") with one writer. Every command ends with one admission pass over the
whole queue (`sluice.domain.constraints.admit`), and each admitted job reserves its run in the
world in the same decision, so two jobs can never both take the last slot.

What each job must satisfy travels with it (`Job.constraints`, copied from its schedule when the
trigger fired), so a job never waits for its schedule's definition to arrive on another topic.
The checker still follows the schedules: a job of an older generation, of a deleted or a disabled
schedule is discarded, also while it waits on a delay (seed scenarios 5 and 7), and the
concurrency groups the schedules name decide which programs count together.

A job that a pass would leave waiting for the first time joins its schedule's earlier job that
already waits instead, when both may (`Job.joinable`, WaitingJobPolicy.JOIN): the earlier job's
trigger context gains its notifications (NotificationsJoined), and its one run gets them all, as long
as they fit one job message (bounds.JOB_NOTIFICATIONS_BYTES); else the job waits apart, as SEPARATE's do.
Only a waiting job is joined, never one admitted (PENDING_LAUNCH), and the joining is decided in
the same pass that would have deferred the job, so it does not depend on how arrivals are batched.

The commands and events are in `sluice.domain.checking_messages`, the state and its fold (`evolve`)
in `sluice.domain.checking_state`; this module decides, and its importers find them all here.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Mapping

import immutables

from sluice.domain import backfills
from sluice.domain.backfills import CancelBackfill, RunScheduleNow, StartBackfill
from sluice.domain.bounds import JOB_NOTIFICATIONS_BYTES, notification_bytes, notifications_bytes
from sluice.domain.checking_messages import (
    EVENTS,
    CheckerCommand,
    CheckerEvent,
    EnqueueJob,
    JobAdmitted,
    JobDeferred,
    JobQueued,
    JobsAdmitted,
    JobWithdrawn,
    LoadLimited,
    NotificationsJoined,
    ObserveRun,
    RunObserved,
    ScheduleTracked,
    ScheduleUntracked,
    admitted_events,
    admitted_jobs,
)
from sluice.domain.checking_state import (
    CheckerState,
    QueuedJob,
    TrackedSchedule,
    evolve,
    fold,
    pending_facts,
    tracked_schedule,
)
from sluice.domain.constraints import (
    UNLIMITED,
    AdmissionDecision,
    Capacity,
    PendingJobFacts,
    WorldFacts,
    admit,
)
from sluice.domain.jobs import Job
from sluice.domain.observations import CheckTime, ObserveSchedule
from sluice.domain.schedules import Schedule

QUEUE_STREAM = "checker-queue"


def decide(state: CheckerState, command: CheckerCommand, now: datetime, capacity: Capacity = UNLIMITED) -> list[CheckerEvent]:
    """The command's own events, then one admission pass over the queue they leave."""
    return decide_admitting(state, [command], now, capacity)[0]


@dataclass(frozen=True)
class Settled:
    """What an admission pass leaves: every job it left waiting waits until `until` at least (None:
    until a run or a schedule changes), while nothing but new jobs arrives (`decide_admitting`)."""

    until: datetime | None


def decide_admitting(state: CheckerState, commands: list[CheckerCommand], now: datetime, capacity: Capacity = UNLIMITED,
                     settled: Settled | None = None) -> tuple[list[CheckerEvent], Settled | None]:
    """Several commands (a poll's worth of messages), then one admission pass over the whole queue
    (one decision, one append); and what that pass settled (None when nothing changed and no check
    was due): `until` is the checker's next timer.

    `settled` is what the passes since the last full one settled, when the caller knows nothing but
    this function changed the state since (else None). Then a batch of arriving jobs and observed
    runs before `until` checks the jobs it can concern alone (`_rechecked`): the other jobs would
    wait on, as the jobs admitted since only made the world stricter, their blockers clear no
    earlier than their next check, an ABORT discards only at a first check, and a waiting job holds
    no slot. The events are those of a full pass."""
    events: list[CheckerEvent] = []
    if (capacity.limit is not None or capacity.hard_limit is not None) and not state.watch_all:
        events.append(LoadLimited(now))  # the load counts every run from now on
        state = evolve(state, events[-1])
        settled = None
    elif _still_settled(settled, now) and _apart(commands):
        return _admitting_arrivals(state, [command.job for command in commands], now, capacity, settled)
    for command in commands:
        own = _own_events(state, command, now)
        state = fold(state, own)
        events += own
    if not events and not any(isinstance(command, CheckTime) for command in commands):
        return [], None
    rechecked = _rechecked(state, commands, events, capacity) if _still_settled(settled, now) else None
    if rechecked is not None:
        decision = admit(rechecked, state.world, now, capacity)
        until = min((t for t in (settled.until, decision.wake_at) if t is not None), default=None)
    else:
        decision = admit(state.facts(), state.world, now, capacity)
        until = decision.wake_at
    admission = _admission(state, decision, now)
    return _queued_once(events, admission, set(decision.launch)), Settled(until)


def _still_settled(settled: Settled | None, now: datetime) -> bool:
    """Whether what the passes since the last full one settled still holds at `now`."""
    return settled is not None and (settled.until is None or now < settled.until)


def _queued_once(events: list[CheckerEvent], admission: list[CheckerEvent], admitted: set[str]) -> list[CheckerEvent]:
    """The events then the admission's, less the JobQueued of a job admitted (`admitted`) or joined on
    arrival: that event also queues the job."""
    queued_by = admitted | {event.job_id for event in admission if isinstance(event, NotificationsJoined)}
    return [*(e for e in events if not (isinstance(e, JobQueued) and e.job.id in queued_by)), *admission]


def _apart(commands: list[CheckerCommand]) -> bool:
    """Arriving jobs only, each of another schedule: no job's own events depend on another's."""
    if not all(type(command) is EnqueueJob and not command.replayed for command in commands):
        return False
    return len({command.job.schedule_id for command in commands}) == len({command.job.id for command in commands}) \
        == len(commands)


def _admitting_arrivals(state: CheckerState, jobs: list[Job], now: datetime, capacity: Capacity,
                        settled: Settled) -> tuple[list[CheckerEvent], Settled | None]:
    """decide_admitting of arriving jobs of distinct schedules, before `settled.until`: the same
    events, but a job the pass admits is never folded into the queue (the JobsAdmitted that queues
    it is folded by the caller), only the jobs it leaves waiting or discards are."""
    events: list[CheckerEvent] = []
    arrived: dict[str, Job] = {}
    """Job id -> a job whose own event is its JobQueued alone: checked before it is queued."""
    for job in jobs:
        own = _enqueue(state, job, now)
        if len(own) == 1:
            arrived[job.id] = job
        else:
            state = fold(state, own)  # withdrawn at once (or nothing: redelivered)
        events += own
    if not events:
        return [], None
    decision = admit([pending_facts(job, job.triggered_at or now) for job in arrived.values()], state.world, now,
                     capacity)
    launched = set(decision.launch)
    state = fold(state, [event for event in events if isinstance(event, JobQueued) and event.job.id in arrived
                         and event.job.id not in launched])
    admission = _admission(state, decision, now, arrived)
    until = min((t for t in (settled.until, decision.wake_at) if t is not None), default=None)
    return _queued_once(events, admission, launched), Settled(until)


def _rechecked(state: CheckerState, commands: list[CheckerCommand], events: list[CheckerEvent],
               capacity: Capacity) -> list[PendingJobFacts] | None:
    """The jobs whose answer the commands can change, when they are arrivals and runs only (None:
    every queued job): the arrivals, and the jobs of the programs whose runs changed or that share
    a concurrency group with one of them. Another job's constraints count no run of those programs,
    so its answer and next check stand; a load limit counts every run, so then it is every job."""
    if not all(isinstance(command, (EnqueueJob, ObserveRun)) for command in commands):
        return None
    changed = {event.program for event in events if isinstance(event, RunObserved)}
    if changed and (capacity.limit is not None or capacity.hard_limit is not None):
        return None
    arrived = {event.job.id for event in events if isinstance(event, JobQueued) and event.job.id in state.queue}
    if not changed:
        return [state.queue[job_id].facts() for job_id in arrived]
    programs = set(changed)
    for members in state.world.groups.values():
        if not changed.isdisjoint(members):
            programs |= members
    concerned = dict.fromkeys(arrived)
    for program in programs:
        concerned.update(dict.fromkeys(state.queued_by_program.get(program, ())))
    return [state.queue[job_id].facts() for job_id in concerned]


def _own_events(state: CheckerState, command: CheckerCommand, now: datetime) -> list[CheckerEvent]:
    match command:
        case EnqueueJob(job, replayed):
            return _enqueue(state, job, now, replayed)
        case ObserveRun(program, run_id, status, at):
            if not state.watches(program) or state.world.observe(program, run_id, status, at) is state.world:
                return []
            return [RunObserved(program, run_id, status, at)]
        case ObserveSchedule(schedule_id, schedule):
            return _observe_schedule(state, schedule_id, schedule, now)
        case CheckTime():
            return []
        case RunScheduleNow() | StartBackfill() | CancelBackfill():
            return backfills.decide_request(state.requested, lambda schedule_id: definition(state, schedule_id),
                                            command, now)
    raise TypeError(f"unknown command {command!r}")


def definition(state: CheckerState, schedule_id: str) -> Schedule | None:
    tracked = state.schedules.get(schedule_id)
    return None if tracked is None or tracked.deleted else tracked.schedule


def next_check(state: CheckerState, now: datetime, capacity: Capacity = UNLIMITED) -> AdmissionDecision:
    """What an admission pass at `now` would decide: its `wake_at` is the checker's one timer, its
    `waiting` says what each job waits on (the operators' view)."""
    return admit(state.facts(), state.world, now, capacity)


def _enqueue(state: CheckerState, job: Job, now: datetime, replayed: bool = False) -> list[CheckerEvent]:
    tracked = state.schedules.get(job.schedule_id)
    if tracked is not None and job.sequence <= tracked.last_sequence and not (replayed and job.id not in state.queue):
        return []  # redelivered
    queued = JobQueued(job, now)
    if tracked is None:
        return [queued]
    if tracked.deleted:
        return [queued, JobWithdrawn(job.id, job.schedule_id, "schedule deleted", now)]
    if job.schedule_generation < tracked.generation:
        return [queued, JobWithdrawn(job.id, job.schedule_id, "schedule updated", now)]
    if not tracked.active and job.schedule_generation == tracked.generation:
        return [queued, JobWithdrawn(job.id, job.schedule_id, "schedule disabled", now)]
    return [queued]


def _observe_schedule(state: CheckerState, schedule_id: str, schedule: Schedule | None,
                      now: datetime) -> list[CheckerEvent]:
    tracked = state.schedules.get(schedule_id)
    if schedule is None:
        if tracked is None or tracked.deleted:
            return []
        return [*_withdraw(state, schedule_id, "schedule deleted", now), ScheduleUntracked(schedule_id, now)]
    if tracked is not None and schedule.generation < tracked.generation:
        return []  # an older change delivered late
    change = ScheduleTracked(schedule_id, schedule.program, schedule.generation, schedule.enabled,
                             schedule.constraints, now, schedule)
    if tracked is not None and tracked_schedule(change, tracked) == tracked:
        return []
    withdrawn = _withdraw(state, schedule_id, "schedule updated", now, below=schedule.generation)
    if not schedule.enabled:
        withdrawn += _withdraw(state, schedule_id, "schedule disabled", now, below=schedule.generation + 1,
                               skip={w.job_id for w in withdrawn})
    return [*withdrawn, change]


def _withdraw(state: CheckerState, schedule_id: str, reason: str, now: datetime, below: int | None = None,
              skip: frozenset[str] | set[str] = frozenset()) -> list[JobWithdrawn]:
    """Discard the schedule's queued jobs (those of a generation below `below`, when given)."""
    withdrawn = [queued.job for job_id, queued in state.queue.items()
                 if queued.job.schedule_id == schedule_id and job_id not in skip
                 and (below is None or queued.job.schedule_generation < below)]
    return [JobWithdrawn(job.id, schedule_id, reason, now) for job in sorted(withdrawn, key=lambda job: job.sequence)]


def _admission(state: CheckerState, decision: AdmissionDecision, now: datetime,
               arrived: Mapping[str, Job] = immutables.Map()) -> list[CheckerEvent]:
    """The decision's events; a launched job is in the queue, or among `arrived` (not queued yet)."""
    events: list[CheckerEvent] = [*admitted_events(
        [arrived[job_id] if job_id in arrived else state.queue[job_id].job for job_id in decision.launch], now,
        set(decision.forced))]
    events += [JobWithdrawn(job_id, state.queue[job_id].job.schedule_id, reason, now)
               for job_id, reason in decision.discard]
    leaving = {*decision.launch, *(job_id for job_id, _ in decision.discard)}
    deferred_now: dict[str, str] = {}
    """Schedule id -> its joinable job this pass defers: the schedule's later jobs in the pass join it."""
    for waiting in decision.waiting:  # in admission order: a schedule's older jobs first
        queued = state.queue[waiting.job_id]
        if queued.checked:
            continue
        job = queued.job
        into = _job_to_join(state, job, leaving, deferred_now)
        if into is not None:
            events.append(NotificationsJoined(job.id, into, job.schedule_id, job.sequence, job.context.notifications,
                                              now))
            continue
        events.append(JobDeferred(job.id, waiting.reasons, now))
        if job.joinable:
            deferred_now.setdefault(job.schedule_id, job.id)
    return events


def _job_to_join(state: CheckerState, job: Job, leaving: set[str], deferred_now: dict[str, str]) -> str | None:
    """The earlier job of `job`'s schedule that waits and stays waiting in this pass, which `job` (about
    to start waiting) joins; None when it waits as a job of its own."""
    if not job.joinable:
        return None
    size: int | None = None
    for candidate in (state.joinable.get(job.schedule_id), deferred_now.get(job.schedule_id)):
        waiting = state.queue.get(candidate) if candidate is not None and candidate not in leaving else None
        if waiting is not None and waiting.job.schedule_generation == job.schedule_generation \
                and waiting.job.sequence < job.sequence:
            if size is None:
                size = notifications_bytes(job.context.notifications)
            if _fits_beside(waiting.job, size):
                return candidate
    return None


def _fits_beside(waiting: Job, size: int) -> bool:
    """Whether `waiting`'s notifications and `size` more bytes of them fit one job (its message under the
    bus limit, as the matcher cuts its fires: sluice.domain.matching)."""
    if not size:
        return True  # nothing joins: a fire by time alone
    total = size
    for notification in waiting.context.notifications:
        total += notification_bytes(notification)
        if total > JOB_NOTIFICATIONS_BYTES:
            return False
    return total <= JOB_NOTIFICATIONS_BYTES
