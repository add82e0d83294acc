"""Jobs read model: every job's state and history, projected from the matcher's, checker's and
launcher's events. Disposable: rebuilt from the log at start."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from datetime import datetime

from sluice.domain import checking, matching, runs
from sluice.domain.codec import EventTypes
from sluice.domain.jobs import Job, JobState
from sluice.eventlog.port import EventLog, RecordedEvent

TYPES = EventTypes((*matching.EVENTS, checking.JobDeferred, checking.JobAdmitted, checking.JobWithdrawn,
                    runs.RunRequested))


@dataclass(frozen=True)
class Transition:
    state: JobState
    at: datetime
    cause: str


@dataclass(frozen=True)
class JobView:
    id: str
    schedule_id: str
    state: JobState
    created_at: datetime
    updated_at: datetime
    job: Job | None = None
    reason: str = ""
    run_id: str = ""
    notifications: int = 0
    history: tuple[Transition, ...] = field(default_factory=tuple)


class JobsView:
    def __init__(self) -> None:
        self._jobs: dict[str, JobView] = {}

    def list(self, schedule_id: str = "") -> list[JobView]:
        jobs = (j for j in self._jobs.values() if not schedule_id or j.schedule_id == schedule_id)
        return sorted(jobs, key=lambda j: (j.created_at, j.id))

    def get(self, job_id: str) -> JobView | None:
        return self._jobs.get(job_id)

    async def follow(self, log: EventLog) -> None:
        async for recorded in log.subscribe(0):
            self.apply(recorded)
            if recorded.position % 100 == 0:
                await asyncio.sleep(0)  # a long catch-up must not starve the other services in the loop

    def apply(self, recorded: RecordedEvent) -> None:
        if recorded.type not in TYPES:
            return
        match TYPES.decode(recorded):
            case matching.JobCreated(job_id, schedule_id, _, at):
                self._jobs[job_id] = JobView(job_id, schedule_id, JobState.PENDING_TRIGGER, at, at,
                                             history=(Transition(JobState.PENDING_TRIGGER, at, "first matching notification"),))
            case matching.NotificationMatched(job_id, _, at):
                self._update(job_id, at, notifications=self._jobs[job_id].notifications + 1)
            case matching.MissedFiresSkipped(job_id, until, policy, at):
                self._transition(job_id, JobState.PENDING_TRIGGER, at,
                                 f"fire times up to {until.isoformat()} missed: {policy.value}")
            case matching.JobTriggered(job, at):
                self._transition(job.id, JobState.PENDING_CONSTRAINT, at, "trigger satisfied", job=job)
            case matching.JobDiscarded(job_id, _, reason, at):
                self._transition(job_id, JobState.DISCARDED, at, reason, reason=reason)
            case checking.JobDeferred(job_id, waiting_on, at):
                self._transition(job_id, JobState.PENDING_CONSTRAINT, at, "waiting for: " + "; ".join(waiting_on))
            case checking.JobAdmitted(job, at, forced):
                self._transition(job.id, JobState.PENDING_LAUNCH, at,
                                 "timed out, launch forced" if forced else "constraints met")
            case checking.JobWithdrawn(job_id, _, reason, at):
                self._transition(job_id, JobState.DISCARDED, at, reason, reason=reason)
            case runs.RunRequested(run_id, job, at):
                self._transition(job.id, JobState.LAUNCHED, at, f"run {run_id}", run_id=run_id)

    def _transition(self, job_id: str, state: JobState, at: datetime, cause: str, **changes: object) -> None:
        view = self._jobs.get(job_id)
        if view is None:
            return
        self._update(job_id, at, state=state, history=(*view.history, Transition(state, at, cause)), **changes)

    def _update(self, job_id: str, at: datetime, **changes: object) -> None:
        self._jobs[job_id] = replace(self._jobs[job_id], updated_at=at, **changes)
