"""The constraint-checker's commands and events (`sluice.domain.checking` decides and folds them)."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Collection, Sequence

from sluice.domain.backfills import (
    BackfillCancelled,
    BackfillRequested,
    CancelBackfill,
    ManualJobRequested,
    RunScheduleNow,
    StartBackfill,
)
from sluice.domain.common import Notification, ProgramRef, RunStatus
from sluice.domain.constraints import Constraint
from sluice.domain.jobs import Job
from sluice.domain.observations import CheckTime, ObserveSchedule
from sluice.domain.schedules import Schedule


# Commands
@dataclass(frozen=True)
class EnqueueJob:
    """The matcher triggered a job."""

    job: Job
    replayed: bool = False
    """A dead letter of the checker's own, published again by an operator: never queued, though later jobs
    of its schedule may have been since (a job is otherwise taken for a redelivery by its sequence)."""


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
class JobsAdmitted:
    """What a JobAdmitted says, for each of `jobs` in order: the launches of one admission pass in one
    event, so a burst of fires admitted at once is a few rows of the log, not one per job. A pass of
    many jobs makes several (`admitted_events`). A log written before this event has a JobAdmitted
    per job; both fold alike."""

    jobs: tuple[Job, ...]
    at: datetime
    forced: tuple[str, ...] = ()
    """The ids of the jobs launched by their timeout's FORCE_LAUNCH policy."""


ADMITTED_PER_EVENT = 500
"""A JobsAdmitted carries at most this many jobs and their trigger notifications together (a job
with more has an event of its own): a backfill admitting thousands at once is not one huge row."""


def admitted_jobs(events: Sequence[object]) -> list[Job]:
    """The jobs the events admit, in order (JobsAdmitted and a log's earlier JobAdmitted)."""
    jobs: list[Job] = []
    for event in events:
        if type(event) is JobsAdmitted:
            jobs += event.jobs
        elif type(event) is JobAdmitted:
            jobs.append(event.job)
    return jobs


def admitted_events(jobs: list[Job], at: datetime, forced: Collection[str]) -> list[JobsAdmitted]:
    """The JobsAdmitted of an admission pass launching `jobs`, in order."""
    chunks: list[list[Job]] = []
    weight = 0
    for job in jobs:
        heft = 1 + len(job.context.notifications)
        if not chunks or weight + heft > ADMITTED_PER_EVENT:
            chunks.append([])
            weight = 0
        chunks[-1].append(job)
        weight += heft
    return [JobsAdmitted(tuple(chunk), at, tuple(job.id for job in chunk if job.id in forced)) for chunk in chunks]


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


EVENTS = (JobQueued, JobDeferred, JobAdmitted, JobsAdmitted, JobWithdrawn, RunObserved, ScheduleTracked,
          ScheduleUntracked, LoadLimited, NotificationsJoined, ManualJobRequested, BackfillRequested, BackfillCancelled)
CheckerEvent = (JobQueued | JobDeferred | JobAdmitted | JobsAdmitted | JobWithdrawn | RunObserved | ScheduleTracked
                | ScheduleUntracked | LoadLimited | NotificationsJoined | ManualJobRequested | BackfillRequested
                | BackfillCancelled)
