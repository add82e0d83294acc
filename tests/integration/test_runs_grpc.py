"""The launcher's ListRuns over gRPC on loopback pages as ListJobs does: oldest first (request time,
then id), page_size at a time, a token resuming after the last run sent; the client reads every
page; bad paging input is INVALID_ARGUMENT naming the field."""
from __future__ import annotations

import asyncio
import random
from datetime import timedelta

import grpc
import pytest

from sluice.client import SluiceClient
from sluice.clock import SimulatedClock
from sluice.domain import runs
from sluice.eventlog.codec import encode
from sluice.domain.matching import MatchNotification
from sluice.eventlog.port import NO_STREAM
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.paging import next_page_token
from sluice.runtime.grpc_server import start_server
from sluice.v1 import runs_pb2, runs_pb2_grpc
from sluice_services.launcher import grpc_api
from sluice_services.launcher.programs import DirectoryCatalog, SparkConfig, SparkSubmitter
from sluice_services.launcher.service import LauncherService
from tests.unit.test_matching import T0, notification, observed, run, schedule

pytestmark = pytest.mark.integration

RUNS = 25


@pytest.fixture
async def served(tmp_path):
    """The launcher's gRPC API over a log holding RUNS requested runs, appended out of request order."""
    log = SqliteEventLog(tmp_path / "events.db")
    _, fired = run(observed(schedule()), *[MatchNotification(notification(n)) for n in range(RUNS)])
    minutes = list(range(RUNS))
    random.Random(7).shuffle(minutes)
    for event, minute in zip(fired, minutes):
        run_id = f"run-{minute % 5}-{event.job.id}"  # several runs requested at the same minute: ordered by id
        requested = runs.RunRequested(run_id, event.job, T0 + timedelta(minutes=minute // 5))
        log.append(runs.stream_name(run_id), [encode(requested, f"r-{run_id}")], NO_STREAM)
    launcher = LauncherService(log, SimulatedClock(T0), DirectoryCatalog(tmp_path / "apps"),
                               SparkSubmitter(SparkConfig()), tmp_path / "data")
    launcher.recover()
    server, port = await start_server(grpc_api.bindings(launcher))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield runs_pb2_grpc.RunsStub(channel), f"127.0.0.1:{port}", launcher
    finally:
        await server.stop(None)
        log.close()


async def test_runs_page_oldest_first_and_the_client_reads_every_page(served):
    stub, address, launcher = served
    listed, token = [], ""
    while True:
        response = await stub.ListRuns(runs_pb2.ListRunsRequest(page_size=4, page_token=token), timeout=10)
        assert len(response.runs) == 4 or not response.next_page_token
        listed += [run.id for run in response.runs]
        if not (token := response.next_page_token):
            break
    expected = [r.id for r in sorted(launcher.runs(), key=lambda r: (r.requested_at, r.id))]
    assert listed == expected and len(set(listed)) == RUNS
    with SluiceClient(address) as client:
        assert [r.id for r in await asyncio.to_thread(client.list_runs)] == expected
        assert [r.id for r in await asyncio.to_thread(client.list_runs, "sched-1")] == expected
        assert await asyncio.to_thread(client.list_runs, "another") == []


@pytest.mark.parametrize("request_, field", [
    (runs_pb2.ListRunsRequest(page_size=-5), "page_size"),
    (runs_pb2.ListRunsRequest(page_token="%%%"), "page_token"),
    (runs_pb2.ListRunsRequest(page_token=next_page_token("Jobs.ListJobs", (1, "job"))), "page_token"),
])
async def test_bad_paging_is_invalid_argument_naming_the_field(served, request_, field):
    stub, _, _ = served
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.ListRuns(request_, timeout=10)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert raised.value.details().startswith(f"{field}:"), raised.value.details()
