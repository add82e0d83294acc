"""A run credential against the real Partitions servicer behind the server's authorization (a server
token on): what a program may do with its own credential (its run's access opened with the launcher's
grants), and what it may not."""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import grpc
import pytest

from sluice.clock import SystemClock
from sluice.domain.common import Notification, PartitionCommitted, PartitionRef, ProgramRef, RunStatus
from sluice.domain.datasets import DatasetSpec, KeySpec, KeyType, Partition
from sluice.domain.jobs import Job, TriggerContext
from sluice.domain.runs import Run
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.runtime.grpc_security import GrpcSecurity
from sluice.runtime.grpc_server import start_server
from sluice.v1 import datasets_pb2 as pb
from sluice.v1 import datasets_pb2_grpc
from sluice_services.datasets import grpc_api as datasets_grpc
from sluice_services.datasets.service import DatasetsService
from sluice_services.datasets.run_credentials import RunCredentials
from sluice_services.launcher.run_data import run_grants

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 22, 10, tzinfo=timezone.utc)
KEYS = (KeySpec("hour", KeyType.INT),)


def run(run_id: str, status: RunStatus = RunStatus.RUNNING) -> Run:
    orders = Notification("n-1", T0, PartitionCommitted("shop", "orders", (PartitionRef({"hour": "1"}, "/o"),)))
    job = Job(f"job-{run_id}", "schedule-1", 1, ProgramRef("web", "analytics", "count"),
              TriggerContext("schedule-1", "hourly", notifications=(orders,)), T0)
    return Run(run_id, job, status, T0)


@pytest.fixture
async def world(tmp_path: Path):
    log = SqliteEventLog(tmp_path / "events.db")
    plane = DatasetsService(log, SystemClock())
    for namespace, name in (("web", "clicks"), ("shop", "orders"), ("shop", "payments")):
        plane.datasets.create(DatasetSpec(namespace, name, KEYS, str(tmp_path / namespace / name)))
        plane.datasets.add(namespace, name, [Partition({"hour": "1"}, f"/{name}/1")])
    for opened in (run("run-1"), run("run-2"), run("run-ended")):  # as the launcher opens them
        plane.open_access(opened.id, run_grants(opened))
    plane.close_access("run-ended", "published")
    retried = run("run-retried")  # attempt 1's launcher lost its lease: attempt 1 released, attempt 2 opened
    plane.open_access(retried.id, run_grants(retried), attempt=1)
    plane.close_access(retried.id, "its launcher lost the lease", attempt=1)
    plane.open_access(retried.id, run_grants(retried), attempt=2)
    credentials = RunCredentials(b"secret", plane.access)
    server, port = await start_server(datasets_grpc.bindings(plane), "127.0.0.1", 0,
                                      security=GrpcSecurity(token="server-token"), authenticators=[credentials])
    channels = []

    def stub(run_id: str, attempt: int | None = None) -> datasets_pb2_grpc.PartitionsStub:
        """With the token of `attempt` (None: of the one the run's access is opened for)."""
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        channels.append(channel)
        stub = datasets_pb2_grpc.PartitionsStub(channel)
        token = credentials.issue(run_id, plane.access(run_id).attempt if attempt is None else attempt)
        metadata = (("authorization", f"Bearer {token}"),)

        class Calls:
            def __getattr__(self, name):
                return lambda request: getattr(stub, name)(request, metadata=metadata, timeout=10)
        return Calls()

    yield stub
    for channel in channels:
        await channel.close()
    await server.stop(0.5)
    log.close()


async def code_of(call) -> grpc.StatusCode:
    try:
        await call
    except grpc.aio.AioRpcError as error:
        return error.code()
    return grpc.StatusCode.OK


def consume(namespace: str, dataset: str, taker: str) -> pb.ConsumeRequest:
    return pb.ConsumeRequest(namespace=namespace, dataset=dataset, consumer="analytics_count", taker=taker, limit=5)


async def test_a_program_reads_and_consumes_its_namespace_and_its_triggering_datasets(world):
    program = world("run-1")
    assert await code_of(program.GetDataset(pb.GetDatasetRequest(namespace="web", name="clicks"))) == grpc.StatusCode.OK
    assert await code_of(program.ListPartitions(pb.ListPartitionsRequest(namespace="web", dataset="clicks"))) \
        == grpc.StatusCode.OK
    taken = await program.Consume(consume("web", "clicks", "run-1"))
    assert [p.partition.location for p in taken.partitions] == ["/clicks/1"]
    assert [p.partition.location for p in (await program.Consume(consume("shop", "orders", "run-1"))).partitions] \
        == ["/orders/1"]
    assert await code_of(program.GetConsumer(pb.GetConsumerRequest(
        namespace="web", dataset="clicks", consumer="analytics_count"))) == grpc.StatusCode.OK


async def test_a_program_reaches_no_other_dataset_and_writes_nothing(world):
    program = world("run-1")
    denied = grpc.StatusCode.PERMISSION_DENIED
    assert await code_of(program.GetDataset(pb.GetDatasetRequest(namespace="shop", name="payments"))) == denied
    assert await code_of(program.Consume(consume("shop", "payments", "run-1"))) == denied
    assert await code_of(program.AddPartitions(pb.AddPartitionsRequest(namespace="web", dataset="clicks"))) == denied
    assert await code_of(program.FinishPartitions(pb.FinishPartitionsRequest(
        namespace="web", dataset="clicks", consumer="analytics_count", taker="run-1", outcome=pb.FINISH_COMPLETE))) \
        == denied
    assert await code_of(program.CreateDataset(pb.CreateDatasetRequest(dataset=pb.Dataset(
        namespace="web", name="more", partition_keys=[pb.PartitionKey(name="hour", type=pb.KEY_TYPE_INT)],
        base_location="/x")))) == denied


async def test_a_program_takes_partitions_for_its_own_run_only(world):
    assert await code_of(world("run-1").Consume(consume("web", "clicks", "run-2"))) == \
        grpc.StatusCode.PERMISSION_DENIED


async def test_the_credential_of_an_ended_run_is_refused(world):
    ended = world("run-ended")
    assert await code_of(ended.GetDataset(pb.GetDatasetRequest(namespace="web", name="clicks"))) == \
        grpc.StatusCode.UNAUTHENTICATED


async def test_the_credential_of_an_attempt_a_retry_superseded_is_refused_naming_both(world):
    """Regression: a token signed the run id only: attempt 1's program, still running on the host of a launcher
    that lost its lease, took partitions with it after the retry's attempt 2 opened the run's access."""
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await world("run-retried", attempt=1).Consume(consume("web", "clicks", "run-retried"))
    assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
    assert refused.value.details() == \
        "run run-retried: this credential is attempt 1's, and attempt 2 is the run's current one"
    taken = await world("run-retried", attempt=2).Consume(consume("web", "clicks", "run-retried"))
    assert [p.partition.location for p in taken.partitions] == ["/clicks/1"]
