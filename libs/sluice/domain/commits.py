"""Exactly-once publishing (Gobblin's commit steps, seed 001): a run's output is published by a commit
sequence that is written to the log before any step runs, and redone after a crash.

    sequence = CommitSequence(id, run_id, datasets=("ns.in", "ns.out"), steps=(
        RecordConsumerState("ns", "in", "hourly", run_id, (PartitionId(3, 0),)),    # inputs are done
        MoveFiles(staged_location, final_location, files),                          # output files in place
        RegisterPartitions("ns", "out", position, partitions)))                     # indexed + notified

Each step is idempotent and can say whether it has been done (verify). The consumer step comes
first: if the run lost its partitions to a timeout and another taker, nothing has been published
yet and the sequence is abandoned. The two log steps are recorded together with their "done"
marker in one append, so their verify is the marker; moving files is verified by the manifest
(sizes and sha256 of every file at the final location: a partial copy does not pass).

A sequence that fails `max_failures` times is quarantined: its datasets take no new sequences until
an operator releases it; sequences on other datasets go on.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from datetime import datetime

from sluice.domain.consumer.state import PartitionId
from sluice.domain.datasets.specs import Partition
from sluice.ids import derived_id
from sluice.domain.errors import FailedPrecondition, InvalidArgument


@dataclass(frozen=True)
class StagedFile:
    path: str
    """Relative to the staged (and to the final) location."""
    size_bytes: int
    sha256: str


@dataclass(frozen=True)
class RecordConsumerState:
    """The run's consumed partitions are completed on its consumer (strictly: still held by the run)."""

    namespace: str
    dataset: str
    consumer: str
    taker: str
    partitions: tuple[PartitionId, ...]


@dataclass(frozen=True)
class MoveFiles:
    """Every file of the manifest is moved from the staged location to the final one."""

    staged_location: str
    final_location: str
    files: tuple[StagedFile, ...]


@dataclass(frozen=True)
class RegisterPartitions:
    """The transaction at `position` (reserved when the sequence was recorded) commits the partitions;
    its commit is the partition notification."""

    namespace: str
    dataset: str
    position: int
    partitions: tuple[Partition, ...]


CommitStep = RecordConsumerState | MoveFiles | RegisterPartitions
STEP_ORDER = (RecordConsumerState, MoveFiles, RegisterPartitions)


@dataclass(frozen=True)
class CommitSequence:
    id: str
    run_id: str
    datasets: tuple[str, ...]
    """Qualified names of every dataset the sequence touches: consumed inputs and outputs."""
    steps: tuple[CommitStep, ...]


def sequence_id_for(run_id: str) -> str:
    """One sequence per run: recording it again (a retried completion) is recognised."""
    return derived_id("commit", run_id)


def stream_name(sequence_id: str) -> str:
    return f"commit-{sequence_id}"


def ordered(steps: tuple[CommitStep, ...]) -> tuple[CommitStep, ...]:
    """Consumer steps first (nothing is published if one fails), then files, then registrations."""
    return tuple(sorted(steps, key=lambda step: STEP_ORDER.index(type(step))))


class CommitStatus(enum.Enum):
    """Where a commit sequence stands."""

    PENDING = "PENDING"
    """Recorded; some steps may not have run. Its datasets take no new sequence until it is done."""
    FINISHED = "FINISHED"
    """Every step is done: the run's output is published, its inputs are completed."""
    ABANDONED = "ABANDONED"
    """It could never complete and nothing of it was published (the run lost its input partitions)."""
    QUARANTINED = "QUARANTINED"
    """Redoing it failed too often; its datasets are skipped until an operator releases it."""


# Events
@dataclass(frozen=True)
class CommitSequenceRecorded:
    sequence: CommitSequence
    at: datetime


@dataclass(frozen=True)
class CommitStepDone:
    sequence_id: str
    step: int
    at: datetime


@dataclass(frozen=True)
class CommitSequenceFinished:
    sequence_id: str
    at: datetime


@dataclass(frozen=True)
class CommitAttemptFailed:
    sequence_id: str
    step: int
    error: str
    at: datetime


@dataclass(frozen=True)
class CommitSequenceQuarantined:
    sequence_id: str
    datasets: tuple[str, ...]
    error: str
    at: datetime


@dataclass(frozen=True)
class CommitSequenceAbandoned:
    sequence_id: str
    reason: str
    at: datetime


@dataclass(frozen=True)
class CommitSequenceReleased:
    sequence_id: str
    at: datetime


EVENTS = (CommitSequenceRecorded, CommitStepDone, CommitSequenceFinished, CommitAttemptFailed,
          CommitSequenceQuarantined, CommitSequenceAbandoned, CommitSequenceReleased)
CommitEvent = (CommitSequenceRecorded | CommitStepDone | CommitSequenceFinished | CommitAttemptFailed
               | CommitSequenceQuarantined | CommitSequenceAbandoned | CommitSequenceReleased)


@dataclass(frozen=True)
class CommitProgress:
    sequence: CommitSequence
    status: CommitStatus = CommitStatus.PENDING
    done: frozenset[int] = frozenset()
    failures: int = 0
    error: str = ""

    def pending_steps(self) -> list[tuple[int, CommitStep]]:
        return [(index, step) for index, step in enumerate(self.sequence.steps) if index not in self.done]

    @property
    def published_anything(self) -> bool:
        return any(not isinstance(self.sequence.steps[index], RecordConsumerState) for index in self.done)


# Commands
@dataclass(frozen=True)
class Record:
    sequence: CommitSequence


@dataclass(frozen=True)
class MarkDone:
    step: int


@dataclass(frozen=True)
class Finish:
    pass


@dataclass(frozen=True)
class RecordFailure:
    step: int
    error: str
    max_failures: int


@dataclass(frozen=True)
class Abandon:
    reason: str


@dataclass(frozen=True)
class Release:
    pass


CommitCommand = Record | MarkDone | Finish | RecordFailure | Abandon | Release
"""What the aggregate's `decide` takes."""


def decide(progress: CommitProgress | None, command: CommitCommand, now: datetime) -> list[CommitEvent]:
    match command:
        case Record(sequence):
            _validate(sequence)
            if progress is None:
                return [CommitSequenceRecorded(sequence, now)]
            if progress.sequence != sequence:
                raise FailedPrecondition(f"commit sequence {sequence.id} was recorded with other steps")
            return []
    if progress is None:
        raise FailedPrecondition("the commit sequence was never recorded")
    sequence_id = progress.sequence.id
    match command:
        case Release():
            if progress.status is not CommitStatus.QUARANTINED:
                raise FailedPrecondition(f"commit sequence {sequence_id} is {progress.status.value}, not QUARANTINED")
            return [CommitSequenceReleased(sequence_id, now)]
    if progress.status is not CommitStatus.PENDING:
        return []
    match command:
        case MarkDone(step):
            return [] if step in progress.done else [CommitStepDone(sequence_id, step, now)]
        case Finish():
            if progress.pending_steps():
                raise FailedPrecondition(f"commit sequence {sequence_id} has steps left")
            return [CommitSequenceFinished(sequence_id, now)]
        case RecordFailure(step, error, max_failures):
            events: list[CommitEvent] = [CommitAttemptFailed(sequence_id, step, error, now)]
            if progress.failures + 1 >= max_failures:
                events.append(CommitSequenceQuarantined(sequence_id, progress.sequence.datasets, error, now))
            return events
        case Abandon(reason):
            if progress.published_anything:
                raise FailedPrecondition(f"commit sequence {sequence_id} published output already; "
                                         "it must be finished, not abandoned")
            return [CommitSequenceAbandoned(sequence_id, reason, now)]
    raise TypeError(f"unknown command {command!r}")


def evolve(progress: CommitProgress | None, event: CommitEvent) -> CommitProgress:
    match event:
        case CommitSequenceRecorded(sequence, _):
            return CommitProgress(sequence)
    assert progress is not None, f"{type(event).__name__} before CommitSequenceRecorded"
    match event:
        case CommitStepDone(_, step, _):
            return replace(progress, done=progress.done | {step})
        case CommitSequenceFinished():
            return replace(progress, status=CommitStatus.FINISHED, error="")
        case CommitAttemptFailed(_, _, error, _):
            return replace(progress, failures=progress.failures + 1, error=error)
        case CommitSequenceQuarantined(_, _, error, _):
            return replace(progress, status=CommitStatus.QUARANTINED, error=error)
        case CommitSequenceAbandoned(_, reason, _):
            return replace(progress, status=CommitStatus.ABANDONED, error=reason)
        case CommitSequenceReleased():
            return replace(progress, status=CommitStatus.PENDING, failures=0)
    raise TypeError(f"unknown event {event!r}")


def _validate(sequence: CommitSequence) -> None:
    if not sequence.steps:
        raise InvalidArgument("sequence.steps", "a commit sequence has at least one step")
    if ordered(sequence.steps) != sequence.steps:
        raise InvalidArgument("sequence.steps", "consumer steps come first, then file moves, then registrations")
    for index, step in enumerate(sequence.steps):
        if isinstance(step, MoveFiles) and not step.files:
            raise InvalidArgument(f"sequence.steps[{index}].files", "a move needs a manifest of at least one file")
        if isinstance(step, RegisterPartitions) and step.position < 0:
            raise InvalidArgument(f"sequence.steps[{index}].position", "must be a reserved position")
