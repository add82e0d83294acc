"""The constraint-checker's state: the queue of jobs waiting for their run constraints, the world of
runs they are checked against, the schedules followed; and its fold (`evolve`) of the checker's
events (`sluice.domain.checking_messages`)."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Mapping, Sequence

import immutables

from sluice.domain import backfills
from sluice.domain.backfills import BackfillCancelled, BackfillRequested, ManualJobRequested
from sluice.domain.checking_messages import (
    CheckerEvent,
    JobAdmitted,
    JobDeferred,
    JobQueued,
    JobsAdmitted,
    JobWithdrawn,
    LoadLimited,
    NotificationsJoined,
    RunObserved,
    ScheduleTracked,
    ScheduleUntracked,
)
from sluice.domain.common import ProgramRef, RunStatus
from sluice.domain.constraints import (
    ConcurrencyConstraint,
    Constraint,
    MaxRunsPerWindowConstraint,
    MinSinceLastRunConstraint,
    PendingJobFacts,
    WorldFacts,
    history_needed,
    join_groups,
)
from sluice.domain.jobs import Job
from sluice.domain.request_book import RequestBook
from sluice.domain.schedules import Schedule
from sluice.ids import run_id_for


@dataclass(frozen=True)
class QueuedJob:
    job: Job
    triggered_at: datetime
    checked: bool = False

    def facts(self) -> PendingJobFacts:
        return pending_facts(self.job, self.triggered_at, self.checked)


def pending_facts(job: Job, triggered_at: datetime, checked: bool = False) -> PendingJobFacts:
    """QueuedJob(job, triggered_at, checked).facts(), for a job not queued (yet)."""
    return PendingJobFacts(job.id, job.program, job.schedule_id, triggered_at, job.constraints, job.priority,
                           job.timeout_seconds, job.timeout_policy, checked, job.sequence)


@dataclass(frozen=True)
class TrackedSchedule:
    program: ProgramRef
    generation: int
    active: bool
    """Exists and is enabled: its jobs may launch."""
    groups: frozenset[str] = frozenset()
    last_sequence: int = 0
    """The highest job sequence queued: a job at or below it is a redelivery."""
    deleted: bool = False
    schedule: Schedule | None = None
    """The definition last observed (run now and backfill build jobs from it)."""


_TRACKED_ACTIVE = TrackedSchedule(ProgramRef("", "", ""), 0, True)
"""A schedule first seen through its job: `_seen` copies it with the job's program, generation and sequence."""


@dataclass(frozen=True)
class CheckerState:
    queue: Mapping[str, QueuedJob] = field(default_factory=immutables.Map)
    """Persistent: a job queued, deferred or admitted costs O(log n), not a copy of the whole queue."""
    queued_by_program: Mapping[ProgramRef, Mapping[str, None]] = field(default_factory=immutables.Map)
    """The queue's job ids by program: a run concerns the jobs of few programs (`_rechecked`)."""
    world: WorldFacts = field(default_factory=WorldFacts)
    schedules: Mapping[str, TrackedSchedule] = field(default_factory=immutables.Map)
    """Persistent: a queued job records its schedule's sequence without copying every schedule's entry."""
    group_refs: Mapping[tuple[str, ProgramRef], int] = field(default_factory=dict)
    """How many schedules put a program into a group: it leaves the group when none does."""
    horizon: timedelta = timedelta(0)
    """How long ended runs are remembered: the longest any schedule's constraints need."""
    watched: frozenset[ProgramRef] = frozenset()
    """Programs whose runs some constraint counts (concurrency, groups, intervals, caps)."""
    watch_all: bool = False
    """A load limit counts every program's runs."""
    joinable: Mapping[str, str] = field(default_factory=immutables.Map)
    """Schedule id -> its waiting job that the schedule's next fires join (deferred, `Job.joinable`)."""
    requested: RequestBook = field(default_factory=RequestBook)
    """Run-now jobs and backfills (sluice.domain.backfills)."""

    def __post_init__(self) -> None:
        for name in ("queue", "queued_by_program", "schedules", "joinable"):
            if not isinstance(getattr(self, name), immutables.Map):
                object.__setattr__(self, name, immutables.Map(getattr(self, name)))

    def watches(self, program: ProgramRef) -> bool:
        """Runs of other programs change no answer: the checker neither records nor reserves them."""
        return self.watch_all or program in self.watched

    def facts(self) -> list[PendingJobFacts]:
        return [queued.facts() for queued in self.queue.values()]

def evolve(state: CheckerState, event: CheckerEvent) -> CheckerState:
    if type(event) is JobsAdmitted:  # most events of a busy checker: not matched against every case first
        return _all_admitted(state, event.jobs, event.at)
    match event:
        case JobAdmitted(job, at):
            return _admitted(state, job, at)
        case JobQueued(job, at):
            return _queued(state, job, at, schedules=_sequence_seen(state, job))
        case ManualJobRequested(job, _, at):
            return _queued(state, job, at, requested=state.requested.with_manual_job(event))
        case BackfillRequested():
            state = _changed(state, requested=state.requested.with_backfill(event),
                             watched=state.watched | {event.template.program})  # its runs' ends are its progress
            return _queued_together(state, backfills.jobs_of(event), event.template, event.at)
        case BackfillCancelled(_, _, withdrawn):
            for job_id in withdrawn:
                state = _dequeued(state, job_id)
            return _changed(state, requested=state.requested.cancelled(event))
        case JobDeferred(job_id):
            queued = state.queue[job_id]
            state = _changed(state, queue=state.queue.set(job_id, _changed(queued, checked=True)))
            schedule_id = queued.job.schedule_id
            if queued.job.joinable and schedule_id not in state.joinable:
                state = _changed(state, joinable=state.joinable.set(schedule_id, job_id))
            return state
        case NotificationsJoined(job_id, into, schedule_id, sequence, notifications):
            state = _dequeued(state, job_id)
            target = state.queue[into]
            context = target.job.context
            joined = replace(target.job, context=replace(context, notifications=context.notifications + notifications))
            tracked = state.schedules[schedule_id]
            return _changed(state, queue=state.queue.set(into, replace(target, job=joined)),
                            schedules=state.schedules.set(schedule_id, replace(
                                tracked, last_sequence=max(tracked.last_sequence, sequence))))
        case JobWithdrawn(job_id):
            if job_id not in state.requested.queued:
                return _dequeued(state, job_id)
            return _dequeued(state, job_id, requested=state.requested.withdrawn(job_id))
        case RunObserved(program, run_id, status, at):
            world = state.world.observe(program, run_id, status, at)
            requested = state.requested
            if status.terminal:
                world = world.forget(at - state.horizon, (program,))
                requested = requested.run_ended(run_id, status is RunStatus.COMPLETED)
            return _changed(state, world=world, requested=requested)
        case ScheduleTracked(schedule_id):
            old = state.schedules.get(schedule_id)
            new = tracked_schedule(event, old)
            return _regroup(_changed(state, schedules=state.schedules.set(schedule_id, new),
                                     horizon=max(state.horizon, history_needed(event.constraints)),
                                     watched=_watch(state.watched, event.program, event.constraints)), old, new)
        case LoadLimited():
            return _changed(state, watch_all=True)
        case ScheduleUntracked(schedule_id):
            old = state.schedules[schedule_id]
            new = replace(old, active=False, groups=frozenset(), deleted=True, schedule=None)
            return _regroup(_changed(state, schedules=state.schedules.set(schedule_id, new)), old, new)
    raise TypeError(f"unknown event {event!r}")


def _admitted(state: CheckerState, job: Job, at: datetime) -> CheckerState:
    if job.id in state.queue:
        changes = _admitted_changes(state.requested, state.world, state.watches(job.program), job, at)
        return _dequeued(state, job.id, **changes)
    # Admitted on arrival: what JobQueued then JobAdmitted make, the queue left as it was.
    changes: dict[str, Any] = {"schedules": _sequence_seen(state, job)}
    world, watched = state.world, state.watched
    if job.constraints:  # none: no group to join, nothing to watch, no history needed
        world = changes["world"] = join_groups(world, job.program, job.constraints)
        watched = changes["watched"] = _watch(watched, job.program, job.constraints)
        changes["horizon"] = max(state.horizon, history_needed(job.constraints))
    watching = state.watch_all or job.program in watched
    changes.update(_admitted_changes(state.requested, world, watching, job, at))
    return _changed(state, **changes)


def _sequence_seen(state: CheckerState, job: Job) -> immutables.Map:
    """The schedules, the job's one tracked (if it was not) with its sequence seen."""
    return state.schedules.set(job.schedule_id, _seen(state.schedules.get(job.schedule_id), job))


def _seen(tracked: TrackedSchedule | None, job: Job) -> TrackedSchedule:
    """The job's schedule as tracked (`tracked`, or tracked from the job if None) with its sequence seen."""
    if tracked is None:  # TrackedSchedule(job.program, job.schedule_generation, True, last_sequence=...)
        return _changed(_TRACKED_ACTIVE, program=job.program, generation=job.schedule_generation,
                        last_sequence=max(0, job.sequence))
    return _changed(tracked, last_sequence=max(tracked.last_sequence, job.sequence))


def _admitted_changes(requested: RequestBook, world: WorldFacts, watched: bool, job: Job,
                      at: datetime) -> dict[str, Any]:
    """The state's fields a job's admission changes: its backfill's progress, its run reserved in
    a watched program; none (no run id computed) for a job of no backfill in an unwatched program."""
    backfilled = job.id in requested.queued
    if not (backfilled or watched):
        return {}
    run_id = run_id_for(job.id)
    changes: dict[str, Any] = {"requested": requested.admitted(job.id, run_id)} if backfilled else {}
    if watched:
        changes["world"] = world.reserve(job.program, run_id, at)
    return changes


def _queued(state: CheckerState, job: Job, at: datetime, **changes: Any) -> CheckerState:
    """The job queued, and `changes` (other fields of the state) made in the same replace."""
    queue = state.queue.set(job.id, QueuedJob(job, job.triggered_at or at))
    # Its program joins the groups it names, tracked schedule or not (a job can arrive first):
    # its runs count for them from now on, also in a pass that checks only newer jobs.
    world = join_groups(state.world, job.program, job.constraints)
    return _changed(state, queue=queue, queued_by_program=_indexed(state.queued_by_program, job.program, job.id),
                    world=world, horizon=max(state.horizon, history_needed(job.constraints)),
                    watched=_watch(state.watched, job.program, job.constraints), **changes)


def _queued_together(state: CheckerState, jobs: list[Job], template: Job, at: datetime) -> CheckerState:
    """`_queued` of many jobs of one program and constraints (`template`'s), in one edit of each map."""
    if not jobs:
        return state
    state = _queued(state, jobs[0], at)
    program = template.program
    with state.queue.mutate() as queue, state.queued_by_program[program].mutate() as of_program:
        for job in jobs[1:]:
            queue[job.id] = QueuedJob(job, job.triggered_at or at)
            of_program[job.id] = None
        return _changed(state, queue=queue.finish(),
                        queued_by_program=state.queued_by_program.set(program, of_program.finish()))


def _dequeued(state: CheckerState, job_id: str, **changes: Any) -> CheckerState:
    """The job out of the queue, and `changes` (other fields of the state) made in the same replace."""
    queued = state.queue.get(job_id)
    if queued is None:
        return _changed(state, **changes) if changes else state
    program = queued.job.program
    ids = state.queued_by_program[program].delete(job_id)
    by_program = state.queued_by_program.set(program, ids) if ids else state.queued_by_program.delete(program)
    schedule_id = queued.job.schedule_id
    if state.joinable.get(schedule_id) == job_id:
        changes["joinable"] = _next_joinable(state, schedule_id, program, job_id)
    return _changed(state, queue=state.queue.delete(job_id), queued_by_program=by_program, **changes)


def _next_joinable(state: CheckerState, schedule_id: str, program: ProgramRef, leaving: str) -> immutables.Map:
    """The schedule's joinable entry once its job `leaving` left the queue: its oldest other deferred
    joinable job, if any."""
    waiting = [queued.job for job_id in state.queued_by_program.get(program, ()) if job_id != leaving
               and (queued := state.queue[job_id]).checked and queued.job.schedule_id == schedule_id
               and queued.job.joinable]
    if not waiting:
        return state.joinable.delete(schedule_id)
    return state.joinable.set(schedule_id, min(waiting, key=lambda job: job.sequence).id)


def _indexed(by_program: immutables.Map, program: ProgramRef, job_id: str) -> immutables.Map:
    return by_program.set(program, by_program.get(program, immutables.Map()).set(job_id, None))


def _changed(value: Any, **changes: Any) -> Any:
    """dataclasses.replace for the state's frozen dataclasses, given fields in their final form
    (immutables.Map, not a dict): a copy of the instance's fields with the changes, without the
    __init__ and __post_init__ that replace runs (evolve's cost, once per event)."""
    new = object.__new__(type(value))
    fields = new.__dict__
    fields.update(value.__dict__)
    fields.update(changes)
    return new


def fold(state: CheckerState, events: Sequence[CheckerEvent]) -> CheckerState:
    """evolve over the events."""
    for event in events:
        state = evolve(state, event)
    return state


def _all_admitted(state: CheckerState, jobs: Sequence[Job], at: datetime) -> CheckerState:
    """`_admitted` of each job in order; a run of jobs admitted on arrival that change only the
    schedules they were seen of (`_seen_only`: a decision's burst of fires) takes one edit of that map."""
    index = 0
    while index < len(jobs):
        job = jobs[index]
        if not _seen_only(state, job):
            state = _admitted(state, job, at)
            index += 1
            continue
        with state.schedules.mutate() as schedules:
            while index < len(jobs) and _seen_only(state, job := jobs[index]):
                schedules[job.schedule_id] = _seen(schedules.get(job.schedule_id), job)
                index += 1
            state = _changed(state, schedules=schedules.finish())
    return state


def _seen_only(state: CheckerState, job: Job) -> bool:
    """Whether `_admitted(state, job, at)` changes only `schedules`: a job admitted on arrival without
    constraints (no group, watch or horizon), of a program not watched (no run reserved), not of a
    backfill (no progress)."""
    return not job.constraints and not state.watch_all and job.id not in state.queue \
        and not (state.watched and job.program in state.watched) \
        and not (state.requested.queued and job.id in state.requested.queued)


RUN_COUNTING = (ConcurrencyConstraint, MinSinceLastRunConstraint, MaxRunsPerWindowConstraint)


def _watch(watched: frozenset[ProgramRef], program: ProgramRef, constraints: tuple[Constraint, ...]) -> frozenset[ProgramRef]:
    """Watching only grows: a run started while nobody watched its program is never counted."""
    if program in watched or not any(isinstance(c, RUN_COUNTING) for c in constraints):
        return watched
    return watched | {program}


def tracked_schedule(change: ScheduleTracked, old: TrackedSchedule | None) -> TrackedSchedule:
    groups = frozenset(c.group for c in change.constraints if isinstance(c, ConcurrencyConstraint) and c.group)
    return TrackedSchedule(change.program, change.generation, change.enabled, groups,
                           old.last_sequence if old else 0, schedule=change.schedule)


def _regroup(state: CheckerState, old: TrackedSchedule | None, new: TrackedSchedule) -> CheckerState:
    """Move the schedule's program out of the groups it no longer names and into the new ones."""
    before = {(g, old.program) for g in old.groups} if old else set()
    after = {(g, new.program) for g in new.groups}
    if before == after:
        return state
    refs, world = dict(state.group_refs), state.world
    for key in before - after:
        refs[key] -= 1
        if not refs[key]:
            del refs[key]
            world = world.leave(*key)
    for key in after - before:
        refs[key] = refs.get(key, 0) + 1
        world = world.join(*key)
    return _changed(state, group_refs=refs, world=world)
