"""Exactly-once publishing with commit sequences, on real event logs and real files.

The crash test stops a run's commit at every boundary between its steps (and halfway through a
move of several files), restarts everything from the log, and checks that the published output
holds each input record exactly once and that the consumer state says the inputs are done."""
from __future__ import annotations

import json
import os
import pwd
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from sluice.clock import SimulatedClock
from sluice.datasets import ConsumerStore, DatasetStore, PartitionQuery
from sluice.domain.commits import (
    CommitSequence,
    CommitStatus,
    MoveFiles,
    RecordConsumerState,
    RegisterPartitions,
    sequence_id_for,
)
from sluice.domain.consumer import ConsumerConfig, ConsumerRef, Outcome
from sluice.domain.datasets import DatasetSpec, KeySpec, KeyType, Partition
from sluice.domain.errors import FailedPrecondition
from sluice_services.datasets.commits import RESERVE, CommitFailed, CommitRunner
from sluice.datasets.files import LocalFiles, PublishError, check_staged, manifest_of
from tests.integration.datasets.backends import Backend, PostgresBackend, SqliteBackend

pytestmark = pytest.mark.integration

CLICKS = DatasetSpec("web", "clicks", (KeySpec("hour", KeyType.INT),), "/unused")
COUNTS = DatasetSpec("web", "click_counts", (KeySpec("hour", KeyType.INT),), "/unused")
INPUT = ConsumerRef("web", "clicks", "counter")
HOURS = (7, 8, 9)


class SimulatedCrash(BaseException):
    """The process dies here (a BaseException: no handler of the code under test catches it)."""


class CrashAt:
    def __init__(self, label: str | None) -> None:
        self.label = label
        self.seen: list[str] = []

    def __call__(self, label: str) -> None:
        self.seen.append(label)
        if label == self.label:
            raise SimulatedCrash(label)


class CrashingFiles(LocalFiles):
    """Moves `files_before_crash` files of the first MoveFiles step, then dies mid-step."""

    def __init__(self, files_before_crash: int) -> None:
        self.left = files_before_crash

    def execute(self, step: MoveFiles) -> None:
        if self.left is None:
            return super().execute(step)
        partial = replace(step, files=step.files[:self.left])
        super().execute(partial)
        self.left = None
        raise SimulatedCrash("in the middle of a move")


class World:
    """One process's view: a log connection, the stores and a commit runner."""

    def __init__(self, backend: Backend, clock: SimulatedClock, boundary=lambda label: None, files=None,
                 max_failures: int = 3) -> None:
        self.log = backend.open_log(clock)
        self.datasets = DatasetStore(self.log, clock)
        self.consumers = ConsumerStore(self.log, self.datasets, clock)
        self.runner = CommitRunner(self.log, self.datasets, self.consumers, clock, boundary=boundary, files=files,
                                   max_failures=max_failures)


class CommitSequenceContract(Backend):
    @pytest.fixture(autouse=True)
    def _data(self, _backend: None, tmp_path: Path) -> None:
        self.root = tmp_path
        self.clock = SimulatedClock()
        world = World(self, self.clock)
        world.datasets.create(CLICKS)
        world.datasets.create(COUNTS)
        for hour in HOURS:   # the input: 3 hours of click records, one file each
            location = tmp_path / "clicks" / f"hour={hour}"
            location.mkdir(parents=True)
            records = [{"hour": hour, "user": f"u{n}"} for n in range(hour)]
            (location / "part-0.json").write_text("".join(json.dumps(r) + "\n" for r in records))
            world.datasets.add("web", "clicks", [Partition({"hour": str(hour)}, str(location), record_count=hour)])

    def run_program(self, world: World, run_id: str) -> CommitSequence:
        """What a run does before its commit: consume, process, stage outputs; the draft sequence."""
        items = world.consumers.consume(INPUT, run_id, 10, config=ConsumerConfig(timeout_seconds=600))
        moves, partitions = [], []
        for item in items:
            hour = item.partition.key["hour"]
            staged = self.root / "staging" / run_id / f"hour={hour}"
            staged.mkdir(parents=True)
            records = (Path(item.partition.location) / "part-0.json").read_text().splitlines()
            for n, record in enumerate(records):   # several files per output partition
                (staged / f"part-{n}.json").write_text(record + "\n")
            final = self.root / "counts" / f"hour={hour}"
            moves.append(MoveFiles(str(staged), str(final), manifest_of(staged)))
            partitions.append(Partition({"hour": hour}, str(final), record_count=len(records)))
        steps = (RecordConsumerState("web", "clicks", "counter", run_id, tuple(i.id for i in items)), *moves,
                 RegisterPartitions("web", "click_counts", RESERVE, tuple(partitions)))
        return CommitSequence(sequence_id_for(run_id), run_id, ("web.clicks", "web.click_counts"), steps)

    def assert_published_exactly_once(self, world: World) -> None:
        published = world.datasets.query("web", "click_counts", PartitionQuery())
        assert sorted(int(p.partition.key["hour"]) for p in published) == list(HOURS)
        records = [line for p in published for f in sorted(Path(p.partition.location).iterdir())
                   for line in f.read_text().splitlines()]
        expected = [json.dumps({"hour": h, "user": f"u{n}"}) for h in HOURS for n in range(h)]
        assert sorted(records) == sorted(expected)
        state = world.consumers.state(INPUT)
        assert state.working_set == ()
        assert [(r.key["hour"], r.outcome, r.taken_by) for r in state.history] == [
            (str(h), Outcome.COMPLETED, "run-1") for h in HOURS]

    def test_a_clean_commit_publishes_once_and_records_the_consumer(self) -> None:
        boundary = CrashAt(None)
        world = World(self, self.clock, boundary)
        progress = world.runner.commit(self.run_program(world, "run-1"))
        assert progress.status is CommitStatus.FINISHED
        assert boundary.seen == ["recorded", "step 0 done", "step 1 executed", "step 1 done", "step 2 executed",
                                 "step 2 done", "step 3 executed", "step 3 done", "step 4 done", "finished"]
        self.assert_published_exactly_once(world)
        assert not (self.root / "staging" / "run-1" / "hour=7").exists()

    @pytest.mark.parametrize("label", ["recorded", "step 0 done", "step 1 executed", "step 1 done",
                                       "step 2 executed", "step 3 done", "step 4 done", "finished",
                                       "mid-move"])
    def test_a_crash_at_any_step_boundary_is_redone_exactly_once_after_restart(self, label: str) -> None:
        files = CrashingFiles(2) if label == "mid-move" else None
        world = World(self, self.clock, CrashAt(label), files=files)
        draft = self.run_program(world, "run-1")
        with pytest.raises(SimulatedCrash):
            world.runner.commit(draft)
        restarted = World(self, self.clock)   # a new process: everything from the log and the files
        unfinished = restarted.runner.recover()
        assert unfinished == []
        assert restarted.runner.progress(draft.id).status is CommitStatus.FINISHED
        self.assert_published_exactly_once(restarted)
        again = restarted.runner.commit(draft)   # the launcher retries its completion: nothing more happens
        assert again.status is CommitStatus.FINISHED
        self.assert_published_exactly_once(restarted)

    def test_a_partial_copy_at_the_final_location_does_not_pass(self) -> None:
        staged = self.root / "partial-staged"
        staged.mkdir()
        (staged / "data.json").write_text('{"n": 1}\n' * 100)
        final = self.root / "partial-final"
        step = MoveFiles(str(staged), str(final), manifest_of(staged))
        final.mkdir()
        (final / "data.json").write_text('{"n": 1}\n' * 40)   # what a copy cut short leaves behind
        files = LocalFiles()
        assert not files.verify(step)
        files.execute(step)
        assert files.verify(step) and (final / "data.json").read_text() == '{"n": 1}\n' * 100
        (final / "part-of-an-earlier-write.json").write_text("{}\n")   # the partition written again
        assert not files.verify(step)
        files.execute(step)
        assert files.verify(step) and [p.name for p in final.iterdir()] == ["data.json"]

    def test_a_staged_link_is_not_published_even_to_a_file_matching_its_manifest(self) -> None:
        """Regression: the manifest check followed links, so a program could publish a link to a file it may
        not read (a program run as another user), its manifest computed from that file's known content."""
        secret = self.root / "secret"
        secret.write_text("the launcher's\n")
        staged = self.root / "linked-staged"
        staged.mkdir()
        (staged / "data.json").write_text("the launcher's\n")
        step = MoveFiles(str(staged), str(self.root / "linked-final"), manifest_of(staged))
        (staged / "data.json").unlink()
        (staged / "data.json").symlink_to(secret)
        files = LocalFiles()
        with pytest.raises(PublishError, match="missing or does not match"):
            check_staged(step)
        with pytest.raises(PublishError, match="outside"):  # refused by its path already
            files.execute(step)
        assert not (self.root / "linked-final" / "data.json").exists()

    @pytest.mark.skipif(os.geteuid() != 0, reason="only root hands files to another user: CI runs as root")
    def test_a_published_file_a_program_user_staged_becomes_the_services(self) -> None:
        nobody = pwd.getpwnam("nobody")
        staged = self.root / "owned-staged"
        staged.mkdir()
        (staged / "data.json").write_text("{}\n")
        os.chown(staged / "data.json", nobody.pw_uid, nobody.pw_gid)
        (staged / "data.json").chmod(0o666)
        final = self.root / "owned-final"
        LocalFiles().execute(MoveFiles(str(staged), str(final), manifest_of(staged)))
        published = (final / "data.json").stat()
        assert (published.st_uid, published.st_gid, published.st_mode & 0o777) == (0, os.getegid(), 0o644)

    @pytest.mark.parametrize("run_2_finished", [False, True])
    def test_a_run_that_lost_its_partitions_publishes_nothing(self, run_2_finished: bool) -> None:
        world = World(self, self.clock)
        draft = self.run_program(world, "run-1")
        self.clock.advance(timedelta(seconds=601))   # run-1 took too long: its partitions time out...
        taken = world.consumers.consume(INPUT, "run-2", 10)  # ...and run-2 takes them
        if run_2_finished:
            world.consumers.complete(INPUT, "run-2", [item.id for item in taken])
        with pytest.raises(FailedPrecondition, match="no longer in the working set" if run_2_finished
                           else "in progress by run-2"):
            world.runner.commit(draft)
        assert world.runner.progress(draft.id).status is CommitStatus.ABANDONED
        assert world.datasets.query("web", "click_counts", PartitionQuery()) == []
        assert not (self.root / "counts").exists()

    def test_a_sequence_failing_repeatedly_quarantines_its_datasets_and_others_proceed(self) -> None:
        class BrokenDisk(LocalFiles):
            fixed = False

            def execute(self, step: MoveFiles) -> None:
                if not self.fixed and "run-1" in step.staged_location:
                    raise OSError("disk full")
                super().execute(step)

        disk = BrokenDisk()
        world = World(self, self.clock, files=disk, max_failures=2)
        world.datasets.create(replace(COUNTS, name="other_counts"))
        draft = self.run_program(world, "run-1")
        with pytest.raises(CommitFailed):
            world.runner.commit(draft)
        restarted = World(self, self.clock, files=disk, max_failures=2)
        restarted.runner.recover()
        assert restarted.runner.progress(draft.id).status is CommitStatus.QUARANTINED
        assert set(restarted.runner.quarantined()) == {"web.clicks", "web.click_counts"}
        with pytest.raises(FailedPrecondition, match="datasets web.click_counts, web.clicks are quarantined"):
            restarted.runner.commit(replace(draft, id="another", run_id="run-3"))
        staged = self.root / "staging" / "run-9"
        staged.mkdir(parents=True)
        (staged / "x.json").write_text("{}\n")
        other = CommitSequence("other", "run-9", ("web.other_counts",), (
            MoveFiles(str(staged), str(self.root / "other"), manifest_of(staged)),
            RegisterPartitions("web", "other_counts", RESERVE, (Partition({"hour": "1"}, str(self.root / "other")),))))
        assert restarted.runner.commit(other).status is CommitStatus.FINISHED   # other datasets go on
        disk.fixed = True
        assert restarted.runner.release(draft.id).status is CommitStatus.FINISHED
        self.assert_published_exactly_once(restarted)


class TestSqliteCommitSequences(SqliteBackend, CommitSequenceContract):
    pass


class TestPostgresCommitSequences(PostgresBackend, CommitSequenceContract):
    pass
