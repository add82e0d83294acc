"""The checker's ListJobs over gRPC on loopback pages: oldest first, at most page_size jobs and at most
MAX_PAGE_BYTES per page, so a listing of jobs with big trigger contexts stays under gRPC's 4 MB
message limit (unpaged, these 1,000 jobs were one ~6 MB response the client refused); the client
reads every page; bad paging input is INVALID_ARGUMENT naming the field."""
from __future__ import annotations

import asyncio

import grpc
import pytest

from sluice.client import SluiceClient
from sluice.clock import SimulatedClock
from sluice.domain import matching
from sluice.eventlog.codec import encode
from sluice.domain.matching import MatchNotification
from sluice.eventlog.port import NO_STREAM
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.paging import MAX_PAGE_BYTES, next_page_token
from sluice.runtime.grpc_server import start_server
from sluice.v1 import jobs_pb2, jobs_pb2_grpc
from sluice_services.composition import checker_spec
from tests.unit.test_matching import T0, notification, observed, run, schedule

pytestmark = pytest.mark.integration

JOBS, PARTITIONS = 1_000, 100


@pytest.fixture
async def served(tmp_path):
    """The checker's gRPC API over a log holding JOBS fired jobs of one schedule, each triggered by a
    notification of PARTITIONS partitions; a stub and the server's address."""
    log = SqliteEventLog(tmp_path / "events.db")
    _, events = run(observed(schedule()), *[MatchNotification(notification(n, partitions=PARTITIONS))
                                            for n in range(JOBS)])
    log.append(matching.stream_name("sched-1"), [encode(event, f"e{i}") for i, event in enumerate(events)], NO_STREAM)
    spec = checker_spec(log, SimulatedClock(T0))
    spec.recover()
    server, port = await start_server(spec.grpc)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield jobs_pb2_grpc.JobsStub(channel), f"127.0.0.1:{port}"
    finally:
        await server.stop(None)
        log.close()


async def test_pages_hold_at_most_page_size_jobs_and_follow_each_other_in_order(served):
    stub, _ = served
    listed, token, pages = [], "", 0
    while True:
        response = await stub.ListJobs(jobs_pb2.ListJobsRequest(page_size=7, page_token=token), timeout=10)
        assert len(response.jobs) == 7 or not response.next_page_token
        listed += [(job.created_at.ToDatetime(), job.id) for job in response.jobs]
        pages += 1
        if not (token := response.next_page_token):
            break
    assert len(listed) == JOBS and listed == sorted(listed) and len(set(listed)) == JOBS
    assert pages == -(-JOBS // 7)


async def test_a_page_stops_short_of_its_size_before_it_passes_the_byte_bound(served):
    stub, address = served
    first = await stub.ListJobs(jobs_pb2.ListJobsRequest(schedule_id="sched-1"), timeout=10)
    assert 0 < len(first.jobs) < JOBS and first.next_page_token
    assert MAX_PAGE_BYTES // 2 < first.ByteSize() <= MAX_PAGE_BYTES
    assert all(len(job.context.notifications[0].partition_committed.partitions) == PARTITIONS for job in first.jobs)
    with SluiceClient(address) as client:
        jobs = await asyncio.to_thread(client.list_jobs, "sched-1")
    assert [job.id for job in jobs[:len(first.jobs)]] == [job.id for job in first.jobs] and len(jobs) == JOBS
    assert len({job.id for job in jobs}) == JOBS


async def test_pending_only_and_the_schedule_filter_page_too(served):
    stub, _ = served
    fired = await stub.ListJobs(jobs_pb2.ListJobsRequest(schedule_id="sched-1", pending_only=True, page_size=3),
                                timeout=10)
    assert [jobs_pb2.JobState.Name(job.state) for job in fired.jobs] == ["PENDING_CONSTRAINT"] * 3
    assert fired.next_page_token
    other = await stub.ListJobs(jobs_pb2.ListJobsRequest(schedule_id="another"), timeout=10)
    assert list(other.jobs) == [] and other.next_page_token == ""


@pytest.mark.parametrize("request_, field", [
    (jobs_pb2.ListJobsRequest(page_size=-1), "page_size"),
    (jobs_pb2.ListJobsRequest(page_token="not a token"), "page_token"),
    (jobs_pb2.ListJobsRequest(page_token=next_page_token("Lineage.ListJobs", ("ns", "job"))), "page_token"),
    (jobs_pb2.ListJobsRequest(page_token=next_page_token("Jobs.ListJobs", ("1", "job"))), "page_token"),
])
async def test_bad_paging_is_invalid_argument_naming_the_field(served, request_, field):
    stub, _ = served
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.ListJobs(request_, timeout=10)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert raised.value.details().startswith(f"{field}:"), raised.value.details()
