"""The launcher's aggregate, one per run: a job's single execution of its program."""
from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from sluice.domain.common import PartitionRef, RunStatus
from sluice.domain.jobs import Job
from sluice.ids import run_id_for  # noqa: F401  (the launcher's run ids, re-exported)


def stream_name(run_id: str) -> str:
    return f"run-{run_id}"


@dataclass(frozen=True)
class OutputPartition:
    namespace: str
    dataset: str
    partition: PartitionRef


@dataclass(frozen=True)
class InputPartition:
    namespace: str
    dataset: str
    partition: PartitionRef


# Commands
@dataclass(frozen=True)
class RequestRun:
    job: Job


@dataclass(frozen=True)
class MarkStarted:
    pid: int


@dataclass(frozen=True)
class MarkCompleted:
    outputs: tuple[OutputPartition, ...]
    inputs: tuple[InputPartition, ...]


@dataclass(frozen=True)
class MarkFailed:
    error: str


@dataclass(frozen=True)
class MarkLost:
    reason: str


# Events
@dataclass(frozen=True)
class RunRequested:
    run_id: str
    job: Job
    at: datetime


@dataclass(frozen=True)
class RunStarted:
    run_id: str
    pid: int
    at: datetime


@dataclass(frozen=True)
class RunCompleted:
    run_id: str
    outputs: tuple[OutputPartition, ...]
    inputs: tuple[InputPartition, ...]
    at: datetime


@dataclass(frozen=True)
class RunFailed:
    run_id: str
    error: str
    at: datetime


@dataclass(frozen=True)
class RunLost:
    run_id: str
    reason: str
    at: datetime


EVENTS = (RunRequested, RunStarted, RunCompleted, RunFailed, RunLost)
RunEvent = RunRequested | RunStarted | RunCompleted | RunFailed | RunLost


@dataclass(frozen=True)
class Run:
    id: str
    job: Job
    status: RunStatus
    requested_at: datetime
    started_at: datetime | None = None
    ended_at: datetime | None = None
    pid: int | None = None
    error: str = ""
    outputs: tuple[OutputPartition, ...] = ()
    inputs: tuple[InputPartition, ...] = ()

    @property
    def duration_seconds(self) -> float | None:
        if self.ended_at is None:
            return None
        return (self.ended_at - (self.started_at or self.requested_at)).total_seconds()


def decide(run: Run | None, command: object, now: datetime) -> list[RunEvent]:
    match command:
        case RequestRun(job):
            return [] if run is not None else [RunRequested(run_id_for(job.id), job, now)]
    if run is None:
        raise ValueError(f"no run for command {command!r}")
    if run.status.terminal:
        return []
    match command:
        case MarkStarted(pid):
            return [RunStarted(run.id, pid, now)] if run.status is RunStatus.STARTING else []
        case MarkCompleted(outputs, inputs):
            return [RunCompleted(run.id, outputs, inputs, now)]
        case MarkFailed(error):
            return [RunFailed(run.id, error, now)]
        case MarkLost(reason):
            return [RunLost(run.id, reason, now)]
    raise TypeError(f"unknown command {command!r}")


def evolve(run: Run | None, event: RunEvent) -> Run:
    match event:
        case RunRequested(run_id, job, at):
            return Run(run_id, job, RunStatus.STARTING, at)
        case RunStarted(_, pid, at):
            return replace(run, status=RunStatus.RUNNING, pid=pid, started_at=at)
        case RunCompleted(_, outputs, inputs, at):
            return replace(run, status=RunStatus.COMPLETED, outputs=outputs, inputs=inputs, ended_at=at)
        case RunFailed(_, error, at):
            return replace(run, status=RunStatus.FAILED, error=error, ended_at=at)
        case RunLost(_, reason, at):
            return replace(run, status=RunStatus.LOST, error=reason, ended_at=at)
    raise TypeError(f"unknown event {event!r}")
