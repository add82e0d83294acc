"""The constraint-checker's aggregate, one per job: admission to launch."""
from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from sluice.domain.jobs import Job, JobState


def stream_name(job_id: str) -> str:
    return f"job-{job_id}"


@dataclass(frozen=True)
class CheckJob:
    job: Job


@dataclass(frozen=True)
class JobAwaitingConstraints:
    job: Job
    at: datetime


@dataclass(frozen=True)
class JobAdmitted:
    job: Job
    at: datetime


EVENTS = (JobAwaitingConstraints, JobAdmitted)
AdmissionEvent = JobAwaitingConstraints | JobAdmitted


@dataclass(frozen=True)
class AdmissionState:
    job: Job | None = None
    state: JobState | None = None


def decide(state: AdmissionState, command: CheckJob, now: datetime) -> list[AdmissionEvent]:
    if state.job is not None:
        return []  # a redelivered trigger: the job is already known
    # Schedules carry no run constraints yet, so a triggered job is admitted at once.
    return [JobAwaitingConstraints(command.job, now), JobAdmitted(command.job, now)]


def evolve(state: AdmissionState, event: AdmissionEvent) -> AdmissionState:
    match event:
        case JobAwaitingConstraints(job):
            return AdmissionState(job, JobState.PENDING_CONSTRAINT)
        case JobAdmitted():
            return replace(state, state=JobState.PENDING_LAUNCH)
    raise TypeError(f"unknown event {event!r}")
