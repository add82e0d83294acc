"""Run now and backfills over the checker's gRPC API on loopback, on a simulated clock and a real SQLite
log: the manual job waits for the schedule's constraints (--ignore-constraints skips the timing ones,
never concurrency), the jobs view lists it, backfills are listed in pages, a request id given again answers
the first request's job or backfill (another request under it is refused), and every hostile input is
refused naming its field."""
from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone

import grpc
import pytest

from sluice.bus.port import Record
from sluice.cli.main import main as cli_main
from sluice.clock import SimulatedClock
from sluice.domain.backfills import CandidatePartition
from sluice.domain.common import PartitionRef, ProgramRef
from sluice.domain.constraints import ConcurrencyConstraint, DelayConstraint
from sluice.domain.observations import ObserveSchedule
from sluice.domain.schedules import Schedule
from sluice.domain.triggers import PartitionTrigger, TimeTrigger
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.runtime.grpc_server import start_server
from sluice.v1 import jobs_pb2, jobs_pb2_grpc
from sluice.wire.common import timestamp_to_proto
from sluice_services.composition import checker_spec
from sluice_services.checker.service import CheckerService

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 22, 12, tzinfo=timezone.utc)
PROGRAM = ProgramRef("ns", "app", "daily")
DAILY = Schedule("daily", "daily", PROGRAM, TimeTrigger("0 2 * * *"), enabled=True,
                 constraints=(ConcurrencyConstraint(1), DelayConstraint(600)))
OFF = Schedule("off", "off", PROGRAM, TimeTrigger("0 2 * * *"), enabled=False)
ON_PARTITIONS = Schedule("parts", "parts", PROGRAM, PartitionTrigger("ns", "d"), enabled=True)


class ListedPartitions:
    """The datasets service's answer to a partition backfill: one partition per date, whatever the ranges."""

    on_listening = None

    async def list(self, namespace, dataset, where, start, end, metadata):
        return tuple(CandidatePartition(PartitionRef({"date": f"2026-11-0{day}"}, f"/data/{day}"),
                                        T0 - timedelta(days=10 - day)) for day in range(1, 4))


@pytest.fixture
async def served(tmp_path):
    log = SqliteEventLog(tmp_path / "events.db")
    clock = SimulatedClock(T0)
    spec = checker_spec(log, clock, partitions=ListedPartitions())
    spec.recover()
    checker: CheckerService = next(b.servicer for b in spec.grpc)._checker
    await checker.apply([(Record("sluice.schedules", 0, offset, b"k", b"", (), 0), ObserveSchedule(s.id, s))
                         for offset, s in enumerate((DAILY, OFF, ON_PARTITIONS))])
    server, port = await start_server(spec.grpc)
    background = [asyncio.create_task(task()) for task in spec.background]  # the jobs view follows the log
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield jobs_pb2_grpc.JobsStub(channel), checker, clock
    finally:
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        await server.stop(None)
        log.close()


async def listed_jobs(stub, schedule_id: str, count: int) -> list:
    """The schedule's jobs once the view (following the log) holds `count` of them."""
    for _ in range(100):
        jobs = (await stub.ListJobs(jobs_pb2.ListJobsRequest(schedule_id=schedule_id), timeout=10)).jobs
        if len(jobs) >= count:
            return list(jobs)
        await asyncio.sleep(0.05)
    raise AssertionError(f"the jobs view never held {count} jobs of {schedule_id}")


async def test_run_now_waits_for_the_constraints_and_ignore_constraints_skips_only_timing(served):
    stub, checker, clock = served
    first = await stub.RunSchedule(jobs_pb2.RunScheduleRequest(schedule_id="daily", request_id="a",
                                                               properties={"limit": "5"}), timeout=10)
    again = await stub.RunSchedule(jobs_pb2.RunScheduleRequest(schedule_id="daily", request_id="a",
                                                               properties={"limit": "5"}), timeout=10)
    assert again.job_id == first.job_id
    assert first.job_id in checker.state.queue  # its delay: 600 s
    clock.advance(timedelta(seconds=600))
    checker.fire_due()
    assert first.job_id not in checker.state.queue  # admitted
    forced = await stub.RunSchedule(jobs_pb2.RunScheduleRequest(schedule_id="daily", ignore_constraints=True,
                                                                request_id="b"), timeout=10)
    queued = checker.state.queue[forced.job_id].job
    assert queued.constraints == (ConcurrencyConstraint(1),)  # waits for the first's run only
    assert queued.context.logical_time == clock.now()
    listed = await listed_jobs(stub, "daily", 2)
    assert [(job.id, jobs_pb2.JobState.Name(job.state)) for job in listed] == [
        (first.job_id, "PENDING_LAUNCH"), (forced.job_id, "PENDING_CONSTRAINT")]
    assert listed[0].context.properties["limit"] == "5"
    assert [(jobs_pb2.JobState.Name(t.state), t.cause) for t in listed[0].history][0] == ("PENDING_CONSTRAINT", "run now")


async def test_a_time_backfill_over_grpc_reports_its_progress_and_cancels(served):
    stub, checker, _ = served
    start = datetime(2026, 11, 1, tzinfo=timezone.utc)
    backfill = await stub.StartBackfill(jobs_pb2.StartBackfillRequest(
        schedule_id="daily", start=timestamp_to_proto(start), end=timestamp_to_proto(start + timedelta(days=7))),
        timeout=10)
    assert (backfill.total, backfill.waiting, backfill.running) == (7, 7, 0)  # each waits on its delay
    listed = await stub.ListBackfills(jobs_pb2.ListBackfillsRequest(schedule_id="daily"), timeout=10)
    assert [b.id for b in listed.backfills] == [backfill.id]
    cancelled = await stub.CancelBackfill(jobs_pb2.CancelBackfillRequest(id=backfill.id), timeout=10)
    assert (cancelled.waiting, cancelled.discarded) == (0, 7) and cancelled.HasField("cancelled_at")
    jobs = await listed_jobs(stub, "daily", 7)
    assert sorted(job.context.logical_time.ToDatetime(tzinfo=timezone.utc) for job in jobs) == [
        start + timedelta(days=d, hours=2) for d in range(7)]
    for _ in range(100):
        if {jobs_pb2.JobState.Name(job.state) for job in await listed_jobs(stub, "daily", 7)} == {"DISCARDED"}:
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the cancelled backfill's jobs are not all DISCARDED")


async def test_backfills_are_listed_oldest_first_in_pages_none_skipped_or_repeated(served):
    stub, _, clock = served
    day = datetime(2026, 11, 1, tzinfo=timezone.utc)

    async def start(schedule_id: str, days: int) -> str:
        clock.advance(timedelta(seconds=days % 2))  # two of them share a request time: ordered by id then
        return (await stub.StartBackfill(jobs_pb2.StartBackfillRequest(
            schedule_id=schedule_id, start=timestamp_to_proto(day + timedelta(days=days)),
            end=timestamp_to_proto(day + timedelta(days=days + 1))), timeout=10)).id

    started = [await start("daily", days) for days in range(5)]

    async def pages(size: int, schedule_id: str = "daily", added: list | None = None) -> list[list[str]]:
        found, token = [], ""
        while True:
            answer = await stub.ListBackfills(jobs_pb2.ListBackfillsRequest(
                schedule_id=schedule_id, page_size=size, page_token=token), timeout=10)
            found.append([b.id for b in answer.backfills])
            if added is not None and len(found) == 1:
                added.append(await start("daily", 9))  # newer than every one listed: on the last page
            if not (token := answer.next_page_token):
                return found

    listed = await pages(2)
    assert [len(page) for page in listed] == [2, 2, 1]
    assert sum(listed, []) == [b.id for b in (await stub.ListBackfills(
        jobs_pb2.ListBackfillsRequest(schedule_id="daily"), timeout=10)).backfills]
    assert sum(listed, []) == [started[0], *sorted(started[1:3]), *sorted(started[3:])]
    added: list[str] = []
    again = await pages(2, added=added)
    assert sum(again, []) == sum(listed, []) + added
    assert await pages(0, schedule_id="off") == [[]]


class PagedBackfills(jobs_pb2_grpc.JobsServicer):
    """ListBackfills answering three pages of two, each token naming the page after it."""

    def __init__(self) -> None:
        self.tokens: list[str] = []

    async def ListBackfills(self, request, context):
        self.tokens.append(request.page_token)
        page = int(request.page_token or 0)
        return jobs_pb2.ListBackfillsResponse(backfills=[jobs_pb2.Backfill(id=f"b{page}{n}") for n in range(2)],
                                              next_page_token=str(page + 1) if page < 2 else "")


async def test_backfills_list_on_the_command_line_follows_every_page(capsys):
    servicer = PagedBackfills()
    server = grpc.aio.server()
    jobs_pb2_grpc.add_JobsServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        said = await asyncio.to_thread(cli_main, ["--server", f"127.0.0.1:{port}", "--json", "backfills", "list"])
    finally:
        await server.stop(None)
    assert said == 0 and servicer.tokens == ["", "1", "2"]
    assert [b["id"] for b in json.loads(capsys.readouterr().out)] == ["b00", "b01", "b10", "b11", "b20", "b21"]


async def test_a_run_now_request_id_given_again_answers_the_same_job_and_refuses_another_body(served):
    stub, checker, _ = served
    asked = jobs_pb2.RunScheduleRequest(schedule_id="daily", request_id="nightly-fix", properties={"limit": "5"},
                                        logical_time=timestamp_to_proto(T0 - timedelta(hours=1)))
    first = await stub.RunSchedule(asked, timeout=10)
    assert (await stub.RunSchedule(asked, timeout=10)).job_id == first.job_id
    queue = dict(checker.state.queue)
    others = [jobs_pb2.RunScheduleRequest(schedule_id="daily", request_id="nightly-fix", properties={"limit": "6"},
                                          logical_time=asked.logical_time),
              jobs_pb2.RunScheduleRequest(schedule_id="daily", request_id="nightly-fix", properties={"limit": "5"}),
              jobs_pb2.RunScheduleRequest(schedule_id="daily", request_id="nightly-fix", properties={"limit": "5"},
                                          logical_time=asked.logical_time, ignore_constraints=True)]
    for other in others:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.RunSchedule(other, timeout=10)
        assert refused.value.code() == grpc.StatusCode.ALREADY_EXISTS
        assert "request_id 'nightly-fix'" in refused.value.details() and first.job_id in refused.value.details()
    assert dict(checker.state.queue) == queue and checker.state.requested.manual_jobs == 1  # nothing new started
    assert (await stub.RunSchedule(asked, timeout=10)).job_id == first.job_id


async def test_a_backfill_request_id_given_again_answers_the_same_backfill_and_refuses_another_range(served):
    stub, checker, _ = served
    day = datetime(2026, 11, 1, tzinfo=timezone.utc)

    def backfill(days: int) -> jobs_pb2.StartBackfillRequest:
        return jobs_pb2.StartBackfillRequest(schedule_id="daily", request_id="november", start=timestamp_to_proto(day),
                                             end=timestamp_to_proto(day + timedelta(days=days)))

    first = await stub.StartBackfill(backfill(7), timeout=10)
    again = await stub.StartBackfill(backfill(7), timeout=10)
    assert (again.id, again.total) == (first.id, 7)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.StartBackfill(backfill(3), timeout=10)
    assert refused.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert "request_id 'november'" in refused.value.details() and first.id in refused.value.details()
    listed = await stub.ListBackfills(jobs_pb2.ListBackfillsRequest(schedule_id="daily"), timeout=10)
    assert [(b.id, b.total) for b in listed.backfills] == [(first.id, 7)]  # nothing new started
    assert len(checker.state.queue) == 7


async def test_a_partition_backfill_request_id_given_again_refuses_other_key_ranges(served):
    stub, checker, _ = served

    def backfill(*ranges: jobs_pb2.KeyRange) -> jobs_pb2.StartBackfillRequest:
        return jobs_pb2.StartBackfillRequest(schedule_id="parts", request_id="dates", keys=ranges)

    date, region = jobs_pb2.KeyRange(name="date", lower="2026-11-01"), jobs_pb2.KeyRange(name="region", upper="m")
    first = await stub.StartBackfill(backfill(date, region), timeout=10)
    assert (await stub.StartBackfill(backfill(region, date), timeout=10)).id == first.id  # the same ranges
    for other in (backfill(date), backfill(jobs_pb2.KeyRange(name="date", lower="2026-11-02"), region),
                  backfill(jobs_pb2.KeyRange(name="date", upper="2026-11-01"), region)):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.StartBackfill(other, timeout=10)
        assert refused.value.code() == grpc.StatusCode.ALREADY_EXISTS and "request_id" in refused.value.details()
    assert list(checker.state.requested.backfills) == [first.id]


@pytest.mark.parametrize("call, request_, code, text", [
    ("ListBackfills", jobs_pb2.ListBackfillsRequest(page_size=-1), grpc.StatusCode.INVALID_ARGUMENT, "page_size"),
    ("ListBackfills", jobs_pb2.ListBackfillsRequest(page_token="not a token"), grpc.StatusCode.INVALID_ARGUMENT,
     "page_token"),
    ("ListBackfills", jobs_pb2.ListBackfillsRequest(page_token="W10="), grpc.StatusCode.INVALID_ARGUMENT,
     "page_token"),
    ("ListBackfills", jobs_pb2.ListBackfillsRequest(
        page_token="WyJKb2JzLkxpc3RKb2JzIixbMSwiYSJdXQ=="), grpc.StatusCode.INVALID_ARGUMENT, "page_token"),

    ("RunSchedule", jobs_pb2.RunScheduleRequest(), grpc.StatusCode.INVALID_ARGUMENT, "schedule_id"),
    ("RunSchedule", jobs_pb2.RunScheduleRequest(schedule_id="nope"), grpc.StatusCode.NOT_FOUND, "schedule nope"),
    ("RunSchedule", jobs_pb2.RunScheduleRequest(schedule_id="off"), grpc.StatusCode.FAILED_PRECONDITION, "schedule off"),
    ("RunSchedule", jobs_pb2.RunScheduleRequest(schedule_id="daily", request_id="a b"), grpc.StatusCode.INVALID_ARGUMENT,
     "request_id"),
    ("RunSchedule", jobs_pb2.RunScheduleRequest(schedule_id="daily", properties={"k": "v" * 70_000}),
     grpc.StatusCode.RESOURCE_EXHAUSTED, "properties"),
    ("StartBackfill", jobs_pb2.StartBackfillRequest(schedule_id="daily"), grpc.StatusCode.INVALID_ARGUMENT, "--from"),
    ("StartBackfill", jobs_pb2.StartBackfillRequest(schedule_id="daily", start=timestamp_to_proto(T0),
                                                    end=timestamp_to_proto(T0 + timedelta(days=10_001))),
     grpc.StatusCode.INVALID_ARGUMENT, "--to"),
    ("StartBackfill", jobs_pb2.StartBackfillRequest(schedule_id="daily", start=timestamp_to_proto(T0),
                                                    end=timestamp_to_proto(T0)), grpc.StatusCode.INVALID_ARGUMENT, "--to"),
    ("StartBackfill", jobs_pb2.StartBackfillRequest(schedule_id="parts", start=timestamp_to_proto(T0),
                                                    end=timestamp_to_proto(T0 + timedelta(days=1))),
     grpc.StatusCode.INVALID_ARGUMENT, "--keys"),
    ("StartBackfill", jobs_pb2.StartBackfillRequest(schedule_id="daily", keys=[jobs_pb2.KeyRange(name="date")]),
     grpc.StatusCode.INVALID_ARGUMENT, "--keys"),
    ("GetBackfill", jobs_pb2.GetBackfillRequest(id="nope"), grpc.StatusCode.NOT_FOUND, "backfill nope"),
    ("CancelBackfill", jobs_pb2.CancelBackfillRequest(), grpc.StatusCode.INVALID_ARGUMENT, "id"),
])
async def test_hostile_requests_are_refused_naming_the_field_or_the_schedule(served, call, request_, code, text):
    stub, _, _ = served
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await getattr(stub, call)(request_, timeout=10)
    assert refused.value.code() == code and text in refused.value.details(), refused.value.details()
