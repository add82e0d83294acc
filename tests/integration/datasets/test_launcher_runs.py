"""The launcher with datasets: a program consumes new partitions through the SDK's partition source,
stages outputs, and the launcher publishes them through a commit sequence on success, or hands the
consumed partitions back (failed, retried) on failure. The "program" is a Python function run in
place of spark-submit, so this needs no Spark; it reads context.json and writes result.json exactly
as a launched program does."""
from __future__ import annotations

import hashlib
import json
import os
import stat
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import pytest

from sluice.bus.port import Record
from sluice.bus.topics import LAUNCH_REQUESTS, PARTITION_NOTIFICATIONS
from sluice.clock import SimulatedClock
from sluice.datasets import PartitionQuery
from sluice.domain.common import ProgramRef, RunStatus
from sluice.domain.consumer import ConsumerRef, Outcome, WorkStatus
from sluice.domain.datasets import DatasetSpec, KeySpec, KeyType, Partition
from sluice.domain.jobs import Job, TriggerContext
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.domain.commits import sequence_id_for
from sluice.ids import derived_id, run_id_for
from sluice.sdk.context import load_context
from sluice.sdk.partitions import Between, PartitionSource, default_consumer_name
from sluice.v1 import jobs_pb2
from sluice.wire.jobs import job_to_proto
from sluice_services.datasets.run_outputs import RunPublisher
from sluice_services.datasets.service import DatasetsService
from sluice_services.launcher.program_api import ProgramApi
from sluice_services.launcher.service import LauncherService
from tests.support.partitions_api import PartitionsApiServer

pytestmark = pytest.mark.integration

PROGRAM = ProgramRef("web", "analytics", "hourly_counts")
CLICKS = DatasetSpec("web", "clicks", (KeySpec("hour", KeyType.INT),), "/unused")


class Finished:
    pid = 4242
    process_start = 0

    def __init__(self, code: int) -> None:
        self.code = code

    async def wait(self) -> int:
        return self.code


class InlineSubmitter:
    """Runs `program(context_path) -> exit code` where spark-submit would start the entry point."""

    def __init__(self, program: Callable[[Path], int]) -> None:
        self.program = program

    async def submit(self, entry_point: Path, context_path: Path, log_path: Path,
                     spark_conf: dict[str, str] | None = None) -> Finished:
        return Finished(self.program(context_path))


class Catalog:
    def entry_point(self, program: ProgramRef) -> Path:
        return Path(__file__)


def counting_program(fail: bool = False, where=None) -> Callable[[Path], int]:
    """Counts the lines of each new clicks partition into a counts partition with the same hour."""
    def run(context_path: Path) -> int:
        context = load_context(context_path)
        source = PartitionSource(context)
        taken = source.take("clicks", limit=10, where=where)
        if fail:
            source.close()
            return 1
        outputs = []
        for partition in taken:
            lines = (Path(partition.location) / "part-0.json").read_text().splitlines()
            staged = Path(context.system.staging_dir) / f"hour={partition.key['hour']}"
            staged.mkdir(parents=True)
            data = json.dumps({"hour": partition.key["hour"], "clicks": len(lines)}).encode() + b"\n"
            (staged / "part-0.json").write_bytes(data)
            outputs.append({"namespace": "web", "dataset": "click_counts", "key": dict(partition.key),
                            "staged_location": str(staged), "format": "json", "size_bytes": len(data),
                            "record_count": 1, "files": [{"path": "part-0.json", "size_bytes": len(data),
                                                          "sha256": hashlib.sha256(data).hexdigest()}]})
        result = {"outputs": outputs, "inputs": [], "consumed": source.consumed_document(), "metrics": {}}
        Path(context.system.result_path).write_text(json.dumps(result))
        source.close()
        return 0
    return run


async def launch_job(log, clock, program: Callable[[Path], int], data_dir: Path, run_data, program_ref,
                     sequence: int = 1, with_api: bool = False, submitter: type[InlineSubmitter] = InlineSubmitter):
    """One launch request for job `sequence` through a real launcher running `program` inline, publishing
    through `run_data` (the datasets service's port); `with_api`: the program is told the Partitions
    API. The launcher and the run, once it ended."""
    launcher = LauncherService(log, clock, Catalog(), submitter(program), data_dir, run_data=run_data,
                               program_api=ProgramApi(run_data) if with_api else None)
    job = Job(derived_id("job", str(sequence)), "schedule-1", 1, program_ref, TriggerContext("schedule-1", "hourly"),
              clock.now())
    request = jobs_pb2.LaunchRequested(job=job_to_proto(job)).SerializeToString()
    await launcher.on_launch_requested(Record(LAUNCH_REQUESTS, 0, sequence, b"k", request, (), 0))
    await launcher.drain()
    return launcher, launcher.get(run_id_for(job.id))


class Harness:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.clock = SimulatedClock(datetime(2026, 11, 22, 10, tzinfo=timezone.utc))
        self.log = SqliteEventLog(root / "events.db", clock=self.clock)
        self.plane = DatasetsService(self.log, self.clock)
        self.publisher = RunPublisher(self.plane, root / "data")  # the datasets service's own, publishing again
        self.api = PartitionsApiServer(self.plane, root / "data")
        self.plane.datasets.create(CLICKS)
        self.plane.datasets.create(DatasetSpec("web", "click_counts", (KeySpec("hour", KeyType.INT),),
                                               str(root / "data" / "web" / "click_counts")))
        self.jobs = 0

    def add_clicks(self, *hours: int) -> None:
        for hour in hours:
            location = self.root / "clicks" / f"hour={hour}"
            location.mkdir(parents=True)
            (location / "part-0.json").write_text("{}\n" * hour)
            self.plane.datasets.add("web", "clicks", [Partition({"hour": str(hour)}, str(location))])

    async def run(self, program: Callable[[Path], int], run_data=None, submitter: type[InlineSubmitter] = InlineSubmitter):
        self.jobs += 1
        return await launch_job(self.log, self.clock, program, self.root / "data", run_data or self.api.run_data(),
                                PROGRAM, self.jobs, with_api=True, submitter=submitter)

    def consumer(self):
        return self.plane.consumers.state(ConsumerRef("web", "clicks", default_consumer_name(load_context_for(self))))


def load_context_for(harness: Harness):
    return next(load_context(p) for p in (harness.root / "runs").glob("*/context.json"))


@pytest.fixture
def harness(tmp_path: Path):
    h = Harness(tmp_path)
    with h.api:
        yield h
    h.log.close()


async def test_a_successful_run_publishes_its_outputs_and_completes_its_inputs(harness: Harness):
    harness.add_clicks(3, 5)
    launcher, run = await harness.run(counting_program())
    assert run.status is RunStatus.COMPLETED, run.error
    published = harness.plane.datasets.query("web", "click_counts", PartitionQuery())
    assert {p.partition.key["hour"]: json.loads(Path(p.partition.location, "part-0.json").read_text())["clicks"]
            for p in published} == {"3": 3, "5": 5}
    assert [r.outcome for r in harness.consumer().history] == [Outcome.COMPLETED, Outcome.COMPLETED]
    assert load_context_for(harness).system.api.address == f"127.0.0.1:{harness.api.port}"
    run_completed = next(r for r in harness.log.read_all(0, 10_000) if r.type == "RunCompleted")
    assert [o.topic for o in launcher.route(run_completed) if o.topic == PARTITION_NOTIFICATIONS] == [], \
        "the registered dataset's transaction announces the outputs, not the run"
    assert [o.topic for r in harness.log.read_all(0, 10_000) for o in harness.plane.route(r)].count(
        PARTITION_NOTIFICATIONS) == 3   # two input transactions and the one output transaction

    harness.add_clicks(7)
    _, second = await harness.run(counting_program())
    assert second.status is RunStatus.COMPLETED
    assert [p.partition.key["hour"] for p in harness.plane.datasets.query("web", "click_counts", PartitionQuery())] \
        == ["3", "5", "7"]   # only the new partition was consumed


async def test_a_failed_run_hands_its_partitions_back_to_be_retried(harness: Harness):
    harness.add_clicks(4)
    _, run = await harness.run(counting_program(fail=True))
    assert run.status is RunStatus.FAILED
    (item,) = harness.consumer().working_set
    assert item.status is WorkStatus.AVAILABLE and item.failures == 1
    _, retry = await harness.run(counting_program())
    assert retry.status is RunStatus.COMPLETED
    assert harness.consumer().working_set == ()


async def test_an_output_key_of_the_wrong_type_fails_the_run_and_publishes_nothing(harness: Harness):
    harness.add_clicks(2)

    def bad_program(context_path: Path) -> int:
        code = counting_program()(context_path)
        result_path = Path(load_context(context_path).system.result_path)
        result = json.loads(result_path.read_text())
        result["outputs"][0]["key"] = {"hour": "two"}
        result_path.write_text(json.dumps(result))
        return code

    _, run = await harness.run(bad_program)
    assert run.status is RunStatus.FAILED and "outputs[0].key.hour: must be an INT" in run.error
    assert harness.plane.datasets.query("web", "click_counts", PartitionQuery()) == []
    assert harness.consumer().working_set[0].failures == 1


class Unwaitable(Finished):
    async def wait(self) -> int:
        raise RuntimeError("a launcher bug")


class FailingOnceTheProgramRan(InlineSubmitter):
    """The program runs (takes its partitions, writes its result); then the launcher fails, its own error."""

    async def submit(self, entry_point: Path, context_path: Path, log_path: Path,
                     spark_conf: dict[str, str] | None = None) -> Finished:
        return Unwaitable(self.program(context_path))


class FailingReleases:
    """The datasets service's port, its releases failing (a bug of theirs, not an outage)."""

    def __init__(self, run_data) -> None:
        self._run_data = run_data
        self.releases = 0

    def __getattr__(self, name: str):
        return getattr(self._run_data, name)

    async def release(self, *args, **kwargs):
        self.releases += 1
        raise RuntimeError("a datasets service bug")


async def test_a_launcher_error_gives_back_what_the_attempt_took_and_ends_its_access(harness: Harness):
    """Regression: the launcher's own error ("launcher error: ...") recorded the run FAILED without releasing the
    attempt at the datasets service, unlike every other failure: the partitions its program took stayed
    IN_PROGRESS until the consumer's timeout, and its credential stayed honoured."""
    harness.add_clicks(4)
    _, run = await harness.run(counting_program(), submitter=FailingOnceTheProgramRan)
    assert run.status is RunStatus.FAILED and run.error == "launcher error: RuntimeError('a launcher bug')"
    (item,) = harness.consumer().working_set
    assert item.status is WorkStatus.AVAILABLE and item.failures == 1
    access = harness.plane.access(run.id)
    assert not access.open and access.attempt == 1 and not access.published
    assert harness.plane.datasets.query("web", "click_counts", PartitionQuery()) == [], "nothing published"


async def test_a_launcher_error_whose_release_fails_too_fails_the_run_with_the_first_error(harness: Harness):
    harness.add_clicks(4)
    run_data = FailingReleases(harness.api.run_data())
    _, run = await harness.run(counting_program(), run_data, submitter=FailingOnceTheProgramRan)
    assert run.status is RunStatus.FAILED and run.error == "launcher error: RuntimeError('a launcher bug')"
    assert run_data.releases == 1, "tried once, not again and again"
    assert harness.plane.access(run.id).open, "left to the consumer's timeout, as before"


def rewriting_result(change: Callable[[dict], str]) -> Callable[[Path], int]:
    """counting_program, then its result.json replaced by `change(result)` (JSON text, as a program may write it)."""
    def program(context_path: Path) -> int:
        code = counting_program()(context_path)
        result_path = Path(load_context(context_path).system.result_path)
        result_path.write_text(change(json.loads(result_path.read_text())))
        return code
    return program


def with_output(**fields) -> Callable[[dict], str]:
    def change(result: dict) -> str:
        result["outputs"][0].update(fields)
        return json.dumps(result)
    return change


def repeated_output(result: dict) -> str:
    result["outputs"].append(dict(result["outputs"][0]))
    return json.dumps(result)


@pytest.mark.parametrize("change, refused", [
    (with_output(size_bytes=2**70), "outputs[0].size_bytes: must be at most"),
    (with_output(record_count=-1), "outputs[0].record_count: must be at least 0"),
    (lambda result: json.dumps(result).replace('"record_count": 1', '"record_count": 1e400'),
     "outputs[0].record_count: must be a whole number, got inf"),
    (with_output(dataset="unregistered", size_bytes=-7), "outputs[0].size_bytes: must be at least 0"),
    (with_output(dataset="unregistered", size_bytes=2**70), "outputs[0].size_bytes: must be at most"),
    (with_output(format="x" * 20_000), "outputs to web.click_counts[0].metadata: 20006 bytes exceeds the limit"),
    (repeated_output, "outputs to web.click_counts[1].key: repeats the key"),
    (with_output(dataset="unregistered", key={"hour": "h" * 300}),
     "outputs[0].final_location: its directory 'hour=hhhhh"),
], ids=["size-over-int64", "negative-count", "infinite-count", "unregistered-negative-size",
        "unregistered-size-over-int64", "metadata-too-big", "key-twice", "key-value-over-a-file-name"])
async def test_an_output_the_dataset_cannot_take_fails_the_run_before_anything_is_published(
        harness: Harness, change, refused):
    """Regression: sizes and counts were checked only by the commit sequence's RegisterPartitions step, after
    the run's inputs were completed and its files moved: the run failed, its input was never retried, its output
    never registered, and the sequence, redone at each later commit to the dataset, quarantined it; a key value
    longer than a directory name may be (255 bytes) failed its MoveFiles step the same way. Unregistered
    outputs took negative sizes; one past int64, or an infinite one, failed the datasets service with UNKNOWN,
    which the launcher waited out forever holding a slot."""
    harness.add_clicks(2)
    _, run = await harness.run(rewriting_result(change))
    assert run.status is RunStatus.FAILED and refused in run.error, run.error
    assert harness.plane.commits.progress(sequence_id_for(run.id)) is None
    assert not (harness.root / "data" / "web").exists()
    assert harness.consumer().working_set[0].failures == 1  # handed out again
    _, retried = await harness.run(counting_program())
    assert retried.status is RunStatus.COMPLETED, retried.error
    assert [p.partition.key for p in harness.plane.datasets.query("web", "click_counts", PartitionQuery())] \
        == [{"hour": "2"}]


@pytest.mark.parametrize("inputs, refused", [
    ([5], "inputs[0]: must be an object"),
    ([{"namespace": "web", "dataset": "clicks"}], "inputs[0].key: must map"),
    ([{"namespace": 5, "dataset": "clicks", "key": {"hour": "2"}}], "inputs[0].namespace: must match"),
    ({"namespace": "web"}, "inputs: must be a list"),
], ids=["not-an-object", "no-key", "namespace-a-number", "not-a-list"])
async def test_a_malformed_input_in_the_result_fails_the_run_before_anything_is_published(
        harness: Harness, inputs, refused):
    """Regression: the inputs (lineage) were read after the outputs were published and the consumed partitions
    completed: a malformed one failed the run with "launcher error: TypeError(...)" over published outputs (a
    namespace of the wrong type was recorded as it was)."""
    harness.add_clicks(2)
    _, run = await harness.run(rewriting_result(lambda result: json.dumps({**result, "inputs": inputs})))
    assert run.status is RunStatus.FAILED and refused in run.error, run.error
    assert harness.plane.commits.progress(sequence_id_for(run.id)) is None
    assert harness.plane.datasets.query("web", "click_counts", PartitionQuery()) == []
    assert harness.consumer().working_set[0].failures == 1


@pytest.mark.parametrize("metrics, refused", [
    ({"log": "x" * (5 << 20)}, "the program's result.json has 5,243,"),
    ({"log": "\u00e9" * (3 << 19)}, "PublishRun request too large"),  # 3 MiB of UTF-8, 9 MiB as JSON with \\u escapes
], ids=["over-the-file-limit", "over-a-grpc-message"])
async def test_a_result_too_big_to_publish_fails_the_run(harness: Harness, metrics, refused):
    """Regression: a result over gRPC's 4 MiB message (a program's big metrics, or thousands of outputs) was
    refused by the datasets service with RESOURCE_EXHAUSTED, which the launcher took for an unreachable service
    and retried forever, holding a run slot; it also read the whole file, whatever its size."""
    harness.add_clicks(2)
    _, run = await harness.run(rewriting_result(lambda result: json.dumps({**result, "metrics": metrics},
                                                                          ensure_ascii=False)))
    assert run.status is RunStatus.FAILED and refused in run.error, run.error[:300]
    assert harness.plane.datasets.query("web", "click_counts", PartitionQuery()) == []
    assert harness.consumer().working_set[0].failures == 1


async def test_a_filtered_consume_takes_only_matching_partitions(harness: Harness):
    harness.add_clicks(1, 8, 9, 12)
    _, run = await harness.run(counting_program(where={"hour": Between(8, 12)}))
    assert run.status is RunStatus.COMPLETED
    assert [p.partition.key["hour"] for p in harness.plane.datasets.query("web", "click_counts", PartitionQuery())] \
        == ["8", "9"]


async def test_a_programs_context_holds_its_run_credential_and_no_event_store_url(harness: Harness):
    """Regression (issue 23): context.json had system.event_log, the event store's URL with its password."""
    harness.add_clicks(1)
    _, run = await harness.run(counting_program())
    assert run.status is RunStatus.COMPLETED, run.error
    (path,) = (harness.root / "runs").glob("*/context.json")
    system = json.loads(path.read_text())["system"]
    assert "event_log" not in system and "events.db" not in path.read_text()
    assert system["api"] == {"address": f"127.0.0.1:{harness.api.port}",
                             "token": harness.api.credentials.issue(run.id, run.attempt.number)}


async def test_a_context_file_and_its_run_directory_are_readable_by_their_owner_only(harness: Harness):
    """Regression (issue 23): context.json was written with the default mode (0644 under umask 022)."""
    harness.add_clicks(1)
    modes = {}

    def program(context_path: Path) -> int:
        modes.update(file=stat.S_IMODE(os.stat(context_path).st_mode),
                     attempt=stat.S_IMODE(os.stat(context_path.parent).st_mode))
        return counting_program()(context_path)

    previous = os.umask(0o022)
    try:
        _, run = await harness.run(program)
    finally:
        os.umask(previous)
    assert run.status is RunStatus.COMPLETED, run.error
    assert modes == {"file": 0o600, "attempt": 0o700}
