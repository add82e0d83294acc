"""Running commit sequences: write ahead, do each step once, redo after a crash, quarantine on repeated failure.

    runner = CommitRunner(log, datasets, consumers, clock)
    runner.recover()                     # at start: unfinished sequences are redone first
    runner.commit(draft)                 # record (positions reserved in the same append), then run

Log steps (consumer state, partition registration) are appended together with their CommitStepDone
marker, so they happen exactly once. A file move is verified by its manifest before it is redone.
`boundary(label)` is called between all of these (a test's crash injection; a no-op otherwise).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Callable, Protocol

from sluice.clock import Clock
from sluice.datasets import ConsumerStore, DatasetStore
from sluice.datasets.store import events_for
from sluice.domain import commits
from sluice.eventlog.codec import EventTypes
from sluice.domain.commits import (
    CommitProgress,
    CommitSequence,
    CommitStatus,
    MoveFiles,
    RecordConsumerState,
    RegisterPartitions,
)
from sluice.domain.consumer.aggregate import Complete
from sluice.domain.consumer.state import ConsumerRef
from sluice.eventlog.port import NO_STREAM, EventLog, StreamAppend, WrongExpectedVersion
from sluice.domain.errors import FailedPrecondition
from sluice.runtime.unit_of_work import reload_nothing, retry_on_conflict
from sluice.datasets.files import LocalFiles

log = logging.getLogger(__name__)

TYPES = EventTypes(commits.EVENTS)
STREAM_PREFIX = "commit-"
MAX_FAILURES = 3
RESERVE = -1
"""The position of a draft RegisterPartitions step: reserved when the sequence is recorded."""
MAX_CONFLICTS = 100


class FileSteps(Protocol):
    def verify(self, step: MoveFiles) -> bool: ...

    def execute(self, step: MoveFiles) -> None: ...

    def clean_up(self, step: MoveFiles) -> None: ...


class CommitFailed(Exception):
    """A step failed; the sequence stays PENDING (redone later) or was QUARANTINED (see `progress`)."""

    def __init__(self, progress: CommitProgress, message: str) -> None:
        super().__init__(message)
        self.progress = progress


@dataclass(frozen=True)
class _Loaded:
    progress: CommitProgress | None
    version: int


class CommitRunner:
    def __init__(self, log: EventLog, datasets: DatasetStore, consumers: ConsumerStore, clock: Clock, *,
                 max_failures: int = MAX_FAILURES, files: FileSteps | None = None,
                 boundary: Callable[[str], None] = lambda label: None) -> None:
        self._log = log
        self._datasets = datasets
        self._consumers = consumers
        self._clock = clock
        self._max_failures = max_failures
        self._files = files or LocalFiles()
        self._boundary = boundary
        self._known: dict[str, _Loaded] = {}

    # -- inspection ----------------------------------------------------------------------------

    def sequences(self) -> list[CommitProgress]:
        return [loaded.progress for loaded in self._known.values() if loaded.progress is not None]

    def quarantined(self) -> dict[str, CommitProgress]:
        """Dataset -> the quarantined sequence that blocks it."""
        return {dataset: p for p in self.sequences() if p.status is CommitStatus.QUARANTINED
                for dataset in p.sequence.datasets}

    def progress(self, sequence_id: str) -> CommitProgress | None:
        return self._load(sequence_id).progress

    # -- recovery ------------------------------------------------------------------------------

    def recover(self, sequence_ids: list[str] | None = None) -> list[CommitProgress]:
        """Learn every sequence (those named, or all in the log) and redo the unfinished ones, each up
        to max_failures times; the ones still failing are quarantined, the others go on. Returns the
        sequences left unfinished."""
        if sequence_ids is None:
            sequence_ids, after = [], 0
            while records := self._log.read_all(after, 10_000):
                sequence_ids += [r.stream.removeprefix(STREAM_PREFIX) for r in records
                                 if r.stream.startswith(STREAM_PREFIX) and r.type == "CommitSequenceRecorded"]
                after = records[-1].position
        for sequence_id in sequence_ids:
            self._refresh(sequence_id)
        for sequence_id in sequence_ids:
            self._redo(sequence_id)
        return [p for p in self.sequences() if p.status in (CommitStatus.PENDING, CommitStatus.QUARANTINED)]

    def settle(self, datasets: tuple[str, ...], except_id: str = "") -> None:
        """Before new work on `datasets`: redo their unfinished sequences; a quarantined one refuses it."""
        for progress in self.sequences():
            if progress.sequence.id == except_id or not set(progress.sequence.datasets) & set(datasets):
                continue
            if progress.status is CommitStatus.PENDING:
                self._redo(progress.sequence.id)
            progress = self.progress(progress.sequence.id)
            if progress is not None and progress.status is CommitStatus.QUARANTINED:
                blocked = sorted(set(progress.sequence.datasets) & set(datasets))
                what = f"datasets {', '.join(blocked)} are" if len(blocked) > 1 else f"dataset {blocked[0]} is"
                raise FailedPrecondition(f"{what} quarantined: commit sequence "
                                         f"{progress.sequence.id} of run {progress.sequence.run_id} failed "
                                         f"{progress.failures} times ({progress.error})")

    def release(self, sequence_id: str) -> CommitProgress:
        """An operator fixed the cause: the quarantined sequence is PENDING again and redone now."""
        self._decide(sequence_id, commits.Release())
        self._redo(sequence_id)
        return self.progress(sequence_id)

    # -- committing ----------------------------------------------------------------------------

    def commit(self, draft: CommitSequence, fence: Callable[[], StreamAppend | None] | None = None) -> CommitProgress:
        """Record the sequence (RegisterPartitions with position RESERVE get theirs in the same
        append, and `fence`'s append too: decided again after any conflict, it may refuse), then run
        it. CommitFailed if a step fails; FailedPrecondition if a dataset is quarantined or the run
        lost its input partitions (then nothing was published)."""
        self.settle(draft.datasets, except_id=draft.id)
        if self._load(draft.id).progress is None:
            self._record(draft, fence)
        self._boundary("recorded")
        return self._run(draft.id)

    def _record(self, draft: CommitSequence, fence: Callable[[], StreamAppend | None] | None) -> None:
        stream = commits.stream_name(draft.id)

        def attempt() -> None:
            sequence, begins = self._reserve(draft)
            events = commits.decide(None, commits.Record(commits.CommitSequence(
                sequence.id, sequence.run_id, sequence.datasets, commits.ordered(sequence.steps))), self._clock.now())
            fenced = fence() if fence is not None else None
            try:
                self._log.append_batch([*begins, *([fenced] if fenced else []),
                                        StreamAppend(stream, events_for(stream, 0, events), NO_STREAM)])
            except WrongExpectedVersion as conflict:
                if conflict.stream != stream:
                    raise  # another writer began a transaction first: reserve again
                # else recorded by a concurrent attempt of the same run
            self._refresh(draft.id)

        retry_on_conflict(attempt, reload_nothing, attempts=MAX_CONFLICTS,
                          what=f"commit sequence {draft.id}: reserving positions")

    def _reserve(self, draft: CommitSequence) -> tuple[CommitSequence, list[StreamAppend]]:
        by_dataset: dict[tuple[str, str], list[int]] = {}
        for index, step in enumerate(draft.steps):
            if isinstance(step, RegisterPartitions) and step.position == RESERVE:
                by_dataset.setdefault((step.namespace, step.dataset), []).append(index)
        steps, begins = list(draft.steps), []
        for (namespace, dataset), indexes in by_dataset.items():
            positions, append = self._datasets.prepare_begin(namespace, dataset, len(indexes), draft.run_id)
            begins.append(append)
            for index, position in zip(indexes, positions):
                steps[index] = replace(steps[index], position=position)
        return replace(draft, steps=tuple(steps)), begins

    def _redo(self, sequence_id: str) -> None:
        for _ in range(self._max_failures):
            progress = self.progress(sequence_id)
            if progress is None or progress.status is not CommitStatus.PENDING:
                return
            try:
                self._run(sequence_id)
            except (CommitFailed, FailedPrecondition) as error:
                log.warning("redoing commit sequence %s failed: %s", sequence_id, error)

    def _run(self, sequence_id: str) -> CommitProgress:
        progress = self.progress(sequence_id)
        assert progress is not None
        if progress.status is not CommitStatus.PENDING:
            return progress
        for index, step in progress.pending_steps():
            try:
                self._do(sequence_id, index, step)
            except FailedPrecondition as lost:
                if isinstance(step, RecordConsumerState) and not self.progress(sequence_id).published_anything:
                    self._decide(sequence_id, commits.Abandon(str(lost)))
                    raise
                self._failed(sequence_id, index, lost)
            except Exception as error:  # any step error: recorded, retried later, quarantined at the limit
                self._failed(sequence_id, index, error)
            self._boundary(f"step {index} done")
        self._decide(sequence_id, commits.Finish())
        finished = self.progress(sequence_id)
        for step in finished.sequence.steps:
            if isinstance(step, MoveFiles):
                self._files.clean_up(step)
        self._boundary("finished")
        return finished

    def _do(self, sequence_id: str, index: int, step: commits.CommitStep) -> None:
        if isinstance(step, MoveFiles):
            if not self._files.verify(step):
                self._files.execute(step)
            self._boundary(f"step {index} executed")
            self._decide(sequence_id, commits.MarkDone(index))
            return
        stream = commits.stream_name(sequence_id)

        def attempt() -> None:  # the effect and its marker in one append
            effect = self._effect(step)
            loaded = self._load(sequence_id)
            marker = commits.decide(loaded.progress, commits.MarkDone(index), self._clock.now())
            appends = [a for a in (effect, StreamAppend(stream, events_for(stream, loaded.version + 1, marker),
                                                        loaded.version)) if a is not None]
            self._log.append_batch(appends)
            self._refresh(sequence_id)

        retry_on_conflict(attempt, lambda conflict: self._refresh(sequence_id), attempts=MAX_CONFLICTS,
                          what=f"commit sequence {sequence_id}: step {index}")

    def _effect(self, step: commits.CommitStep) -> StreamAppend | None:
        if isinstance(step, RecordConsumerState):
            ref = ConsumerRef(step.namespace, step.dataset, step.consumer)
            return self._consumers.prepare(ref, Complete(step.taker, step.partitions, strict=True))
        assert isinstance(step, RegisterPartitions)
        return self._datasets.prepare_commit(step.namespace, step.dataset, step.position, step.partitions)

    def _failed(self, sequence_id: str, index: int, error: BaseException) -> None:
        self._decide(sequence_id, commits.RecordFailure(index, f"{type(error).__name__}: {error}",
                                                        self._max_failures))
        progress = self.progress(sequence_id)
        raise CommitFailed(progress, f"commit sequence {sequence_id}, step {index}: {error}") from error

    # -- the sequence's stream -----------------------------------------------------------------

    def _decide(self, sequence_id: str, command: commits.CommitCommand) -> None:
        stream = commits.stream_name(sequence_id)

        def attempt() -> None:
            loaded = self._load(sequence_id)
            events = commits.decide(loaded.progress, command, self._clock.now())
            if events:
                self._log.append(stream, events_for(stream, loaded.version + 1, events), loaded.version)
                self._refresh(sequence_id)

        retry_on_conflict(attempt, lambda conflict: self._refresh(sequence_id), attempts=MAX_CONFLICTS,
                          what=f"commit sequence {sequence_id}")

    def _load(self, sequence_id: str) -> _Loaded:
        loaded = self._known.get(sequence_id)
        return loaded if loaded is not None else self._refresh(sequence_id)

    def _refresh(self, sequence_id: str) -> _Loaded:
        progress, version = None, NO_STREAM
        for recorded in self._log.read_stream(commits.stream_name(sequence_id)):
            progress, version = commits.evolve(progress, TYPES.decode(recorded)), recorded.version
        loaded = _Loaded(progress, version)
        if progress is not None:
            self._known[sequence_id] = loaded
        return loaded
