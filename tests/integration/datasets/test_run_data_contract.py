"""The launcher's RunData port (services/launcher/run_data.py): every adapter behaves alike. The gRPC
adapter against a real datasets gRPC server on loopback, and the in-thread one the scenarios use
(tests/support/run_data.py), each over a datasets service on a SQLite log: opening a run's access
gives a token the datasets service honours with the run's grants; publishing registers the outputs
of registered datasets (announced by their transaction) exactly once, and ends the access; a refused
result is a PublishError; releasing gives back the partitions the run took."""
from __future__ import annotations

import hashlib
import json
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import pytest

from sluice.clock import SimulatedClock
from sluice.datasets import PartitionQuery
from sluice.datasets.files import PublishError
from sluice.domain.consumer import ConsumerRef, Outcome, WorkStatus
from sluice.domain.datasets import DatasetSpec, KeySpec, KeyType, Partition
from sluice.domain.datasets.run_access import AccessGrant
from sluice.domain.errors import FailedPrecondition, InvalidArgument
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.runtime.access import Grant, Role
from sluice_services.datasets.run_credentials import RunCredentials
from sluice_services.datasets.service import DatasetsService
from tests.support.partitions_api import PartitionsApiServer
from tests.support.run_data import LocalRunData

pytestmark = pytest.mark.integration

GRANTS = (AccessGrant("web", ("*",)), AccessGrant("shop", ("orders",)))
CLICKS = ConsumerRef("web", "clicks", "counter")


class World:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.clock = SimulatedClock(datetime(2026, 11, 22, 10, tzinfo=timezone.utc))
        self.log = SqliteEventLog(root / "events.db", clock=self.clock)
        self.plane = DatasetsService(self.log, self.clock)
        self.plane.datasets.create(DatasetSpec("web", "clicks", (KeySpec("hour", KeyType.INT),), str(root / "clicks")))
        self.plane.datasets.create(DatasetSpec("web", "counts", (KeySpec("hour", KeyType.INT),),
                                               str(root / "data" / "web" / "counts")))
        self.plane.datasets.add("web", "clicks", [Partition({"hour": "1"}, str(root / "clicks" / "hour=1"))])

    def staged(self, run_id: str, dataset: str, hour: str) -> dict:
        staged = self.root / "runs" / run_id / "staging" / f"{dataset}-{hour}"
        staged.mkdir(parents=True)
        data = b'{"clicks": 1}\n'
        (staged / "part-0.json").write_bytes(data)
        return {"namespace": "web", "dataset": dataset, "key": {"hour": hour}, "staged_location": str(staged),
                "size_bytes": len(data), "record_count": 1,
                "files": [{"path": "part-0.json", "size_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}]}

    def take(self, run_id: str) -> list:
        items = self.plane.consumers.consume(CLICKS, run_id, 10)
        return [{"namespace": "web", "dataset": "clicks", "consumer": "counter", "ids": [str(i.id) for i in items]}]


@contextmanager
def local(world: World) -> Iterator[tuple[object, RunCredentials]]:
    run_data = LocalRunData(world.plane, world.root / "data")
    yield run_data, run_data.credentials


@contextmanager
def over_grpc(world: World) -> Iterator[tuple[object, RunCredentials]]:
    with PartitionsApiServer(world.plane, world.root / "data") as server:
        yield server.run_data(), server.credentials


@pytest.fixture(params=[local, over_grpc], ids=["in-thread", "grpc"])
def adapter(request, tmp_path: Path):
    world = World(tmp_path)
    with request.param(world) as (run_data, credentials):
        yield world, run_data, credentials
    world.log.close()


async def test_an_opened_run_gets_a_token_honoured_with_its_grants_until_it_is_published(adapter):
    world, run_data, credentials = adapter
    token = await run_data.open_run("run-1", GRANTS)
    assert run_data.address() and credentials.authenticate(token, None).grants == (
        Grant(Role.PROGRAM, "web", frozenset({"*"})), Grant(Role.PROGRAM, "shop", frozenset({"orders"})))
    assert await run_data.open_run("run-1", GRANTS) == token   # asked again after a failover: the same
    await run_data.publish("run-1", {"outputs": [], "consumed": []})
    assert credentials.authenticate(token, None) is None


async def test_publishing_registers_outputs_once_and_says_which_a_transaction_announced(adapter):
    world, run_data, _ = adapter
    await run_data.open_run("run-1", GRANTS)
    result = {"outputs": [world.staged("run-1", "counts", "1"), world.staged("run-1", "unregistered", "1")],
              "consumed": world.take("run-1")}
    outputs = await run_data.publish("run-1", result)
    assert [(o.dataset, o.announced) for o in outputs] == [("counts", True), ("unregistered", False)]
    assert all(Path(o.partition.location, "part-0.json").is_file() for o in outputs)
    assert await run_data.publish("run-1", result) == outputs   # a launcher that crashed before recording it
    assert len(world.plane.datasets.query("web", "counts", PartitionQuery())) == 1
    assert [r.outcome for r in world.plane.consumers.state(CLICKS).history] == [Outcome.COMPLETED]


@pytest.mark.parametrize("result", [
    {"outputs": [{"namespace": "web", "dataset": "counts", "key": {"hour": "1"}, "staged_location": "/etc",
                  "files": [{"path": "passwd", "size_bytes": 1, "sha256": "0" * 64}]}]},
    {"outputs": [{"namespace": "../web", "dataset": "counts", "key": {}, "staged_location": "/x", "files": []}]},
    {"outputs": [{"dataset": "counts"}]},
])
async def test_a_result_the_datasets_service_refuses_is_a_publish_error(adapter, result):
    world, run_data, _ = adapter
    with pytest.raises(PublishError):
        await run_data.publish("run-1", result)
    assert world.plane.datasets.query("web", "counts", PartitionQuery()) == []


async def test_releasing_gives_the_partitions_back_and_ends_the_access(adapter):
    world, run_data, credentials = adapter
    token = await run_data.open_run("run-2", GRANTS)
    taken = world.take("run-2")
    await run_data.release("run-2", taken, "exit code 1")
    assert [(i.status, i.failures) for i in world.plane.consumers.state(CLICKS).working_set] == [
        (WorkStatus.AVAILABLE, 1)]   # to be taken again
    assert credentials.authenticate(token, None) is None


@pytest.mark.parametrize("run_id", ["", "run/../1", "x" * 200])
async def test_a_hostile_run_id_is_refused_naming_it(adapter, run_id):
    _, run_data, _ = adapter
    with pytest.raises(InvalidArgument) as refused:
        await run_data.open_run(run_id, GRANTS)
    assert refused.value.field == "run_id"
    with pytest.raises(InvalidArgument):
        await run_data.release(run_id, [], "x")
    with pytest.raises(PublishError):
        await run_data.publish(run_id, {"outputs": []})


# -- attempts: a launcher that lost its lease and resumes (docs/decisions.md, "Launcher and programs") --

def counts(world: World) -> list[dict]:
    return [p.partition.key for p in world.plane.datasets.query("web", "counts", PartitionQuery())]


async def test_a_stale_attempt_publishes_nothing_once_the_new_owner_released_it_and_retried(adapter):
    world, run_data, credentials = adapter
    await run_data.open_run("run-1", GRANTS, attempt=1)       # launcher A starts attempt 1
    taken_by_1 = world.take("run-1")
    # A pauses; B takes the lease over: attempt 1 released (LOST), attempt 2 opened, takes a newer partition
    assert await run_data.release("run-1", [], "its launcher lost the lease", attempt=1) is None
    world.plane.datasets.add("web", "clicks", [Partition({"hour": "2"}, str(world.root / "clicks" / "hour=2"))])
    token = await run_data.open_run("run-1", GRANTS, attempt=2)
    taken_by_2 = world.take("run-1")
    # A resumes: its program exited 0, it publishes attempt 1, then releases what attempt 1 took
    with pytest.raises(PublishError, match="attempt 1 of run run-1 is not its current attempt"):
        await run_data.publish("run-1", {"outputs": [world.staged("run-1", "counts", "1")],
                                         "consumed": taken_by_1}, attempt=1)
    assert await run_data.release("run-1", taken_by_1, "publishing outputs failed", attempt=1) is None
    assert counts(world) == [] and credentials.authenticate(token, None) is not None, "attempt 2 goes on"
    with pytest.raises(FailedPrecondition, match="attempt 1 of run run-1 is not its current attempt"):
        await run_data.open_run("run-1", GRANTS, attempt=1)
    outputs = await run_data.publish("run-1", {"outputs": [world.staged("run-1", "counts", "2")],
                                               "consumed": taken_by_2}, attempt=2)
    assert [o.partition.key for o in outputs] == counts(world) == [{"hour": "2"}]
    assert Path(outputs[0].partition.location, "part-0.json").is_file()
    state = world.plane.consumers.state(CLICKS)
    assert [(r.key, r.outcome) for r in state.history] == [({"hour": "2"}, Outcome.COMPLETED)]
    assert [(i.partition.key, i.status, i.failures) for i in state.working_set] == [
        ({"hour": "1"}, WorkStatus.AVAILABLE, 1)], "what attempt 1 took is given back, not stranded"


async def test_an_attempt_released_as_lost_or_killed_cannot_publish_afterwards(adapter):
    world, run_data, _ = adapter
    await run_data.open_run("run-1", GRANTS, attempt=1)
    taken = world.take("run-1")
    await run_data.release("run-1", [], "its launcher lost the lease", attempt=1)   # LOST, no retry left
    with pytest.raises(PublishError, match="attempt 1 of run run-1 has ended"):
        await run_data.publish("run-1", {"outputs": [world.staged("run-1", "counts", "1")], "consumed": taken},
                               attempt=1)
    assert counts(world) == []
    assert [i.status for i in world.plane.consumers.state(CLICKS).working_set] == [WorkStatus.IN_PROGRESS]


async def test_releasing_an_attempt_that_published_answers_what_it_published(adapter):
    world, run_data, credentials = adapter
    await run_data.open_run("run-1", GRANTS, attempt=1)
    taken = world.take("run-1")
    outputs = await run_data.publish("run-1", {"outputs": [world.staged("run-1", "counts", "1")], "consumed": taken},
                                     attempt=1)
    # A stopped before recording the run's completion; B takes over and releases attempt 1
    assert await run_data.release("run-1", taken, "its launcher lost the lease", attempt=1) == outputs
    assert [r.outcome for r in world.plane.consumers.state(CLICKS).history] == [Outcome.COMPLETED]
    with pytest.raises(FailedPrecondition, match="attempt 1 published its outputs"):
        await run_data.open_run("run-1", GRANTS, attempt=2)
    with pytest.raises(PublishError, match="attempt 1 published its outputs; attempt 2 cannot"):
        await run_data.publish("run-1", {"outputs": [world.staged("run-1", "counts", "2")], "consumed": []},
                               attempt=2)
    assert counts(world) == [{"hour": "1"}]


async def test_a_tokens_attempt_is_refused_once_the_next_attempt_opened_the_runs_access(adapter):
    """Regression: tokens signed the run id only: attempt 1's program, still running on the host of a launcher
    that lost its lease, used the Partitions API with its token after the retry's attempt 2 opened the access."""
    world, run_data, credentials = adapter
    first = await run_data.open_run("run-1", GRANTS, attempt=1)
    await run_data.release("run-1", [], "its launcher lost the lease", attempt=1)
    second = await run_data.open_run("run-1", GRANTS, attempt=2)
    assert first != second and await run_data.open_run("run-1", GRANTS, attempt=2) == second
    assert credentials.authenticate(first, None) is None
    assert credentials.refusal(first) == "run run-1: this credential is attempt 1's, and attempt 2 is the run's current one"
    assert credentials.authenticate(second, None).name == "run:run-1"
    prefix, run_id, _, digest = first.split(".")
    assert credentials.authenticate(".".join((prefix, run_id, "2", digest)), None) is None, "an attempt forged"
