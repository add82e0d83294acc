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
trigger context gains its notifications (NotificationsJoined), and its one run gets them all.
Only a waiting job is joined, never one admitted (PENDING_LAUNCH), and the joining is decided in
the same pass that would have deferred the job, so it does not depend on how arrivals are batched.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Mapping

import immutables

from sluice.domain import backfills
from sluice.domain.backfills import (
    BackfillCancelled,
    BackfillRequested,
    CancelBackfill,
    ManualJobRequested,
    RunScheduleNow,
    StartBackfill,
)
from sluice.domain.common import Notification, ProgramRef, RunStatus
from sluice.domain.constraints import (
    UNLIMITED,
    AdmissionDecision,
    Capacity,
    ConcurrencyConstraint,
    Constraint,
    MaxRunsPerWindowConstraint,
    MinSinceLastRunConstraint,
    PendingJobFacts,
    WorldFacts,
    admit,
    history_needed,
    join_groups,
)
from sluice.domain.jobs import Job
from sluice.domain.observations import CheckTime, ObserveSchedule
from sluice.domain.request_book import RequestBook
from sluice.domain.schedules import Schedule
from sluice.ids import run_id_for

QUEUE_STREAM = "checker-queue"


# Commands
@dataclass(frozen=True)
class EnqueueJob:
    """The matcher triggered a job."""

    job: Job


@dataclass(frozen=True)
class ObserveRun:
    """A program's run changed status (from the program-status notifications)."""

    program: ProgramRef
    run_id: str
    status: RunStatus
    at: datetime


CheckerCommand = EnqueueJob | ObserveRun | ObserveSchedule | CheckTime | RunScheduleNow | StartBackfill | CancelBackfill
"""What the aggregate's `decide` takes."""


# Events
@dataclass(frozen=True)
class JobQueued:
    """The job entered PENDING_CONSTRAINT."""

    job: Job
    at: datetime


@dataclass(frozen=True)
class JobDeferred:
    """The job's first check left it waiting; from now on its ABORT constraints wait too."""

    job_id: str
    waiting_on: tuple[str, ...]
    at: datetime


@dataclass(frozen=True)
class JobAdmitted:
    """PENDING_LAUNCH: the launcher is asked to start the job's run, which counts as running from `at`.
    Without a JobQueued before it, the job was admitted on arrival: this event also queued it."""

    job: Job
    at: datetime
    forced: bool = False
    """Launched by its timeout's FORCE_LAUNCH policy although timing constraints were not met."""


@dataclass(frozen=True)
class NotificationsJoined:
    """The job's trigger fired while `into`, an earlier job of its schedule, waited for its
    constraints: instead of waiting too, its notifications joined `into`'s trigger context, and it
    leaves the queue JOINED, without a run of its own. Without a JobQueued before it, the job
    joined on arrival: this event also stands for its queueing (its `sequence`)."""

    job_id: str
    into: str
    schedule_id: str
    sequence: int
    notifications: tuple[Notification, ...]
    at: datetime


@dataclass(frozen=True)
class JobWithdrawn:
    """DISCARDED by the checker: a constraint can never be met, a timeout, or its schedule changed."""

    job_id: str
    schedule_id: str
    reason: str
    at: datetime


@dataclass(frozen=True)
class RunObserved:
    program: ProgramRef
    run_id: str
    status: RunStatus
    at: datetime


@dataclass(frozen=True)
class ScheduleTracked:
    """What the checker keeps of a schedule: enough to discard stale jobs and to know its groups."""

    schedule_id: str
    program: ProgramRef
    generation: int
    enabled: bool
    constraints: tuple[Constraint, ...]
    at: datetime
    schedule: Schedule | None = None
    """The whole definition: run-now and backfill jobs are built from it (None in events before it was kept)."""


@dataclass(frozen=True)
class ScheduleUntracked:
    schedule_id: str
    at: datetime


@dataclass(frozen=True)
class LoadLimited:
    """The checker runs with a load limit: from now on it counts the runs of every program."""

    at: datetime


EVENTS = (JobQueued, JobDeferred, JobAdmitted, JobWithdrawn, RunObserved, ScheduleTracked, ScheduleUntracked,
          LoadLimited, NotificationsJoined, ManualJobRequested, BackfillRequested, BackfillCancelled)
CheckerEvent = (JobQueued | JobDeferred | JobAdmitted | JobWithdrawn | RunObserved | ScheduleTracked
                | ScheduleUntracked | LoadLimited | NotificationsJoined | ManualJobRequested | BackfillRequested
                | BackfillCancelled)


@dataclass(frozen=True)
class QueuedJob:
    job: Job
    triggered_at: datetime
    checked: bool = False

    def facts(self) -> PendingJobFacts:
        job = self.job
        return PendingJobFacts(job.id, job.program, job.schedule_id, self.triggered_at, job.constraints, job.priority,
                               job.timeout_seconds, job.timeout_policy, self.checked, job.sequence)


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
    elif settled is not None and (settled.until is None or now < settled.until) and _apart(commands):
        return _admitting_arrivals(state, [command.job for command in commands], now, capacity, settled)
    for command in commands:
        own = _own_events(state, command, now)
        state = fold(state, own)
        events += own
    if not events and not any(isinstance(command, CheckTime) for command in commands):
        return [], None
    rechecked = None
    if settled is not None and (settled.until is None or now < settled.until):
        rechecked = _rechecked(state, commands, events, capacity)
    if rechecked is not None:
        decision = admit(rechecked, state.world, now, capacity)
        until = min((t for t in (settled.until, decision.wake_at) if t is not None), default=None)
    else:
        decision = admit(state.facts(), state.world, now, capacity)
        until = decision.wake_at
    admission = _admission(state, decision, now)
    # admitted or joined on arrival: that event also queues the job
    queued_by = {event.job.id for event in admission if isinstance(event, JobAdmitted)}
    queued_by |= {event.job_id for event in admission if isinstance(event, NotificationsJoined)}
    return [*(e for e in events if not (isinstance(e, JobQueued) and e.job.id in queued_by)), *admission], Settled(until)


def _apart(commands: list[CheckerCommand]) -> bool:
    """Arriving jobs only, each of another schedule: no job's own events depend on another's."""
    if not all(type(command) is EnqueueJob for command in commands):
        return False
    return len({command.job.schedule_id for command in commands}) == len({command.job.id for command in commands}) \
        == len(commands)


def _admitting_arrivals(state: CheckerState, jobs: list[Job], now: datetime, capacity: Capacity,
                        settled: Settled) -> tuple[list[CheckerEvent], Settled | None]:
    """decide_admitting of arriving jobs of distinct schedules, before `settled.until`: the same
    events, but a job the pass admits is never folded into the queue (the JobAdmitted that queues
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
    decision = admit([QueuedJob(job, job.triggered_at or now).facts() for job in arrived.values()], state.world, now,
                     capacity)
    launched = set(decision.launch)
    state = fold(state, [event for event in events if isinstance(event, JobQueued) and event.job.id in arrived
                         and event.job.id not in launched])
    admission = _admission(state, decision, now, arrived)
    queued_by = launched | {event.job_id for event in admission if isinstance(event, NotificationsJoined)}
    until = min((t for t in (settled.until, decision.wake_at) if t is not None), default=None)
    return [*(e for e in events if not (isinstance(e, JobQueued) and e.job.id in queued_by)), *admission], Settled(until)


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
        case EnqueueJob(job):
            return _enqueue(state, job, now)
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


def _enqueue(state: CheckerState, job: Job, now: datetime) -> list[CheckerEvent]:
    tracked = state.schedules.get(job.schedule_id)
    if tracked is not None and job.sequence <= tracked.last_sequence:
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
    if tracked is not None and _tracked(change, tracked) == tracked:
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
    forced = set(decision.forced)
    events: list[CheckerEvent] = [JobAdmitted(arrived[job_id] if job_id in arrived else state.queue[job_id].job, now,
                                              job_id in forced) for job_id in decision.launch]
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
    for candidate in (state.joinable.get(job.schedule_id), deferred_now.get(job.schedule_id)):
        waiting = state.queue.get(candidate) if candidate is not None and candidate not in leaving else None
        if waiting is not None and waiting.job.schedule_generation == job.schedule_generation \
                and waiting.job.sequence < job.sequence:
            return candidate
    return None


def evolve(state: CheckerState, event: CheckerEvent) -> CheckerState:
    match event:
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
        case JobAdmitted(job, at) if job.id not in state.queue:
            # Admitted on arrival: what JobQueued then JobAdmitted make, the queue left as it was.
            world = join_groups(state.world, job.program, job.constraints)
            watched = _watch(state.watched, job.program, job.constraints)
            changes = {"world": world, "watched": watched,
                       "horizon": max(state.horizon, history_needed(job.constraints))}
            watching = state.watch_all or job.program in watched
            changes.update(_admitted_changes(state.requested, world, watching, job, at))
            return _changed(state, schedules=_sequence_seen(state, job), **changes)
        case JobAdmitted(job, at):
            changes = _admitted_changes(state.requested, state.world, state.watches(job.program), job, at)
            return _dequeued(state, job.id, **changes)
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
            new = _tracked(event, old)
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


def _sequence_seen(state: CheckerState, job: Job) -> immutables.Map:
    """The schedules, the job's one tracked (if it was not) with its sequence seen."""
    tracked = state.schedules.get(job.schedule_id) or TrackedSchedule(job.program, job.schedule_generation, True)
    seen = _changed(tracked, last_sequence=max(tracked.last_sequence, job.sequence))
    return state.schedules.set(job.schedule_id, seen)


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


def fold(state: CheckerState, events: list[CheckerEvent]) -> CheckerState:
    for event in events:
        state = evolve(state, event)
    return state


RUN_COUNTING = (ConcurrencyConstraint, MinSinceLastRunConstraint, MaxRunsPerWindowConstraint)


def _watch(watched: frozenset[ProgramRef], program: ProgramRef, constraints: tuple[Constraint, ...]) -> frozenset[ProgramRef]:
    """Watching only grows: a run started while nobody watched its program is never counted."""
    if program in watched or not any(isinstance(c, RUN_COUNTING) for c in constraints):
        return watched
    return watched | {program}


def _tracked(change: ScheduleTracked, old: TrackedSchedule | None) -> TrackedSchedule:
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
