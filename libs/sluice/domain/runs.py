"""The launcher's aggregate, one per run: a job's single execution of its program, made of one
attempt or more. An attempt that ends LOST (or FAILED, when the job's retry policy says so) with
retries left is followed by another attempt of the same run, due after the policy's delay; the run
ends once, with the status of its last attempt.

A cancel (asked by a caller, or by the launcher when the attempt passed the job's time limit) is
recorded first; a run that has not started its program ends KILLED at once, a running one once its
program ended: whatever the program's exit then (except a completion that came first), the run ends
KILLED with the cancel's reason, and is never retried."""
from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from sluice.domain.common import PartitionRef, RunStatus
from sluice.domain.errors import FailedPrecondition
from sluice.domain.jobs import Job
from sluice.ids import run_id_for  # noqa: F401  (the launcher's run ids, re-exported)


def stream_name(run_id: str) -> str:
    return f"run-{run_id}"


@dataclass(frozen=True)
class OutputPartition:
    namespace: str
    dataset: str
    partition: PartitionRef
    announced: bool = False
    """Its registered dataset's transaction announced it (the datasets service); else the run's completion
    does. Runs completed before the datasets service existed say False."""


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
    """The current attempt's process was seen started: `process_start` is its start time in clock
    ticks after boot (/proc/<pid>/stat), which tells it from a later process given the same pid."""

    pid: int
    process_start: int = 0


@dataclass(frozen=True)
class MarkSparkApplication:
    """The current attempt's program reported its Spark application (id, and driver UI address or "")."""

    application_id: str
    ui_url: str = ""


@dataclass(frozen=True)
class MarkCompleted:
    outputs: tuple[OutputPartition, ...]
    inputs: tuple[InputPartition, ...]


@dataclass(frozen=True)
class MarkFailed:
    error: str
    retryable: bool = True
    """False when retrying cannot help (the outputs could not be published): the run ends FAILED."""


@dataclass(frozen=True)
class MarkLost:
    reason: str


@dataclass(frozen=True)
class RequestCancel:
    """Stop the run: `reason` as the caller gave it (or the time limit's), `requested_by` who asked."""

    reason: str
    requested_by: str


RunCommand = RequestRun | MarkStarted | MarkSparkApplication | MarkCompleted | MarkFailed | MarkLost | RequestCancel
"""What the aggregate's `decide` takes."""


# Events
@dataclass(frozen=True)
class RunRequested:
    run_id: str
    job: Job
    at: datetime
    epoch: int = 0
    """The launcher lease's epoch of the launcher that recorded it (sluice.domain.lease; 0: none)."""


@dataclass(frozen=True)
class RunStarted:
    run_id: str
    pid: int
    at: datetime
    attempt: int = 1
    process_start: int = 0
    epoch: int = 0
    """The lease epoch of the launcher that started it: the attempt's owner."""


@dataclass(frozen=True)
class SparkApplicationStarted:
    """Attempt `attempt`'s driver runs Spark application `application_id`, its UI at `ui_url` ("": none)."""

    run_id: str
    attempt: int
    application_id: str
    ui_url: str
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


@dataclass(frozen=True)
class RunRetryScheduled:
    """Attempt `attempt` ended with `status` (LOST or FAILED); attempt `attempt + 1` is due at `due_at`."""

    run_id: str
    attempt: int
    status: RunStatus
    error: str
    due_at: datetime
    at: datetime
    epoch: int = 0
    """The lease epoch of the launcher that decided the retry: the next attempt's owner until one starts it."""


@dataclass(frozen=True)
class RunCancelRequested:
    """Recorded before the program is killed, so that a launcher restarted in between still kills it."""

    run_id: str
    reason: str
    requested_by: str
    at: datetime


@dataclass(frozen=True)
class RunKilled:
    run_id: str
    reason: str
    requested_by: str
    at: datetime


EVENTS = (RunRequested, RunStarted, SparkApplicationStarted, RunCompleted, RunFailed, RunLost, RunRetryScheduled,
          RunCancelRequested, RunKilled)
RunEvent = RunRequested | RunStarted | SparkApplicationStarted | RunCompleted | RunFailed | RunLost | RunRetryScheduled \
    | RunCancelRequested | RunKilled


@dataclass(frozen=True)
class CancelRequest:
    reason: str
    requested_by: str
    at: datetime


@dataclass(frozen=True)
class Attempt:
    """One start (or try to start) of the run's program."""

    number: int
    due_at: datetime
    status: RunStatus = RunStatus.STARTING
    started_at: datetime | None = None
    ended_at: datetime | None = None
    pid: int | None = None
    process_start: int = 0
    error: str = ""
    spark_application_id: str = ""
    spark_ui_url: str = ""
    """The driver's UI while it runs ("": none reported, or the UI disabled)."""
    epoch: int = 0
    """The lease epoch of the launcher that owns the attempt: the one that recorded its intent, then the
    one that started it. A launcher of another home cannot find its process (0: recorded without a lease)."""


@dataclass(frozen=True)
class Run:
    id: str
    job: Job
    status: RunStatus
    requested_at: datetime
    started_at: datetime | None = None
    """When its first attempt started."""
    ended_at: datetime | None = None
    pid: int | None = None
    """The current attempt's process."""
    error: str = ""
    outputs: tuple[OutputPartition, ...] = ()
    inputs: tuple[InputPartition, ...] = ()
    attempts: tuple[Attempt, ...] = ()
    """Every attempt, oldest first; the last one is the current one."""
    cancel: CancelRequest | None = None
    """Asked to stop: its program is killed, the run ends KILLED."""

    @property
    def duration_seconds(self) -> float | None:
        if self.ended_at is None:
            return None
        return (self.ended_at - (self.started_at or self.requested_at)).total_seconds()

    @property
    def attempt(self) -> Attempt:
        return self.attempts[-1] if self.attempts else Attempt(1, self.requested_at, self.status, self.started_at,
                                                               self.ended_at, self.pid)

    @property
    def spark_application_id(self) -> str:
        """The Spark application of the latest attempt that reported one ("": none did)."""
        return next((a.spark_application_id for a in reversed(self.attempts) if a.spark_application_id), "")

    @property
    def due_at(self) -> datetime:
        """When the current attempt may be started (a retry waits for its delay)."""
        return self.attempt.due_at

    @property
    def time_limit_at(self) -> datetime | None:
        """When the running attempt passes the job's time limit (None: no limit, not running, or cancelled)."""
        attempt = self.attempt
        if not self.job.max_run_seconds or attempt.status is not RunStatus.RUNNING or attempt.started_at is None \
                or self.cancel is not None:
            return None
        return attempt.started_at + timedelta(seconds=self.job.max_run_seconds)


def time_limit_cancel(run: Run, now: datetime) -> RequestCancel | None:
    """The cancel the launcher asks for once the running attempt passed the job's time limit."""
    limit_at = run.time_limit_at
    if limit_at is None or now < limit_at:
        return None
    return RequestCancel(f"time limit {describe_seconds(run.job.max_run_seconds)} exceeded", TIME_LIMIT)


TIME_LIMIT = "launcher (time limit)"


def describe_seconds(seconds: int) -> str:
    """7200 -> "2h", 5400 -> "1h30m", 90 -> "1m30s": the largest units, none of them zero."""
    parts, left = [], seconds
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)):
        count, left = divmod(left, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


def decide(run: Run | None, command: RunCommand, now: datetime, epoch: int = 0) -> list[RunEvent]:
    """`epoch`: the deciding launcher's lease epoch, recorded as the owner of the attempt it requests or starts."""
    match command:
        case RequestRun(job):
            return [] if run is not None else [RunRequested(run_id_for(job.id), job, now, epoch)]
    if run is None:
        raise ValueError(f"no run for command {command!r}")
    if isinstance(command, RequestCancel):
        return _cancel(run, command, now)
    if run.status.terminal:
        return []
    if run.cancel is not None and isinstance(command, (MarkFailed, MarkLost)):
        return [RunKilled(run.id, run.cancel.reason, run.cancel.requested_by, now)]
    match command:
        case MarkStarted(pid, process_start):
            return [RunStarted(run.id, pid, now, run.attempt.number, process_start, epoch)] \
                if run.status is RunStatus.STARTING else []
        case MarkSparkApplication(application_id, ui_url):
            attempt = run.attempt
            if attempt.status is not RunStatus.RUNNING or (attempt.spark_application_id, attempt.spark_ui_url) == \
                    (application_id, ui_url):
                return []
            return [SparkApplicationStarted(run.id, attempt.number, application_id, ui_url, now)]
        case MarkCompleted(outputs, inputs):
            return [RunCompleted(run.id, outputs, inputs, now)]
        case MarkFailed(error, retryable):
            policy = run.job.retry_policy
            if retryable and policy.retry_failed and _retries_left(run):
                return [_retry(run, RunStatus.FAILED, error, now, epoch)]
            return [RunFailed(run.id, error, now)]
        case MarkLost(reason):
            return [_retry(run, RunStatus.LOST, reason, now, epoch)] if _retries_left(run) else [RunLost(run.id, reason, now)]
    raise TypeError(f"unknown command {command!r}")


def _cancel(run: Run, command: RequestCancel, now: datetime) -> list[RunEvent]:
    """FailedPrecondition for an ended run; nothing more for one already being cancelled. A run whose
    program has not started (queued, or a retry waiting for its delay) ends KILLED at once."""
    if run.status.terminal:
        raise FailedPrecondition(f"run {run.id} has ended: it is {run.status.value}")
    if run.cancel is not None:
        return []
    requested = RunCancelRequested(run.id, command.reason, command.requested_by, now)
    if run.status is RunStatus.RUNNING:
        return [requested]
    return [requested, RunKilled(run.id, command.reason, command.requested_by, now)]


def _retries_left(run: Run) -> bool:
    return run.attempt.number <= run.job.retry_policy.max_retries


def _retry(run: Run, status: RunStatus, error: str, now: datetime, epoch: int) -> RunRetryScheduled:
    delay = run.job.retry_policy.delay_before(run.attempt.number)
    return RunRetryScheduled(run.id, run.attempt.number, status, error, now + timedelta(seconds=delay), now, epoch)


def evolve(run: Run | None, event: RunEvent) -> Run:
    match event:
        case RunRequested(run_id, job, at, epoch):
            return Run(run_id, job, RunStatus.STARTING, at, attempts=(Attempt(1, at, epoch=epoch),))
        case RunStarted(_, pid, at, _, process_start, epoch):
            attempt = replace(run.attempt, status=RunStatus.RUNNING, started_at=at, pid=pid, process_start=process_start,
                              epoch=epoch)
            return replace(run, status=RunStatus.RUNNING, pid=pid, started_at=run.started_at or at,
                           attempts=_with_current(run, attempt))
        case SparkApplicationStarted(_, attempt, application_id, ui_url, _):
            if attempt != run.attempt.number:
                return run
            reported = replace(run.attempt, spark_application_id=application_id, spark_ui_url=ui_url)
            return replace(run, attempts=_with_current(run, reported))
        case RunCompleted(_, outputs, inputs, at):
            return _ended(replace(run, outputs=outputs, inputs=inputs), RunStatus.COMPLETED, "", at)
        case RunFailed(_, error, at):
            return _ended(run, RunStatus.FAILED, error, at)
        case RunLost(_, reason, at):
            return _ended(run, RunStatus.LOST, reason, at)
        case RunCancelRequested(_, reason, requested_by, at):
            return replace(run, cancel=CancelRequest(reason, requested_by, at))
        case RunKilled(_, reason, requested_by, at):
            return _ended(run, RunStatus.KILLED, f"killed by {requested_by}: {reason}" if reason
                          else f"killed by {requested_by}", at)
        case RunRetryScheduled(_, attempt, status, error, due_at, at, epoch):
            ended = replace(run.attempt, status=status, error=error, ended_at=at)
            return replace(run, status=RunStatus.STARTING, pid=None, error=error,
                           attempts=(*_with_current(run, ended), Attempt(attempt + 1, due_at, epoch=epoch)))
    raise TypeError(f"unknown event {event!r}")


def _ended(run: Run, status: RunStatus, error: str, at: datetime) -> Run:
    attempt = replace(run.attempt, status=status, error=error, ended_at=at)
    return replace(run, status=status, error=error, ended_at=at, attempts=_with_current(run, attempt))


def _with_current(run: Run, attempt: Attempt) -> tuple[Attempt, ...]:
    return (*run.attempts[:-1], attempt) if run.attempts else (attempt,)
