"""The lineage gRPC API on loopback is the HTTP API's equivalent: events recorded through RecordEvent
read back through gRPC and through the HTTP app, GetJob resolves names as the HTTP paths do (301,
300, 404), GetLineage answers the graph GET /api/v1/lineage does, and ListJobs/ListRuns page."""
from __future__ import annotations

import asyncio
import json
import uuid

import grpc
import pytest
from openlineage.client.event_v2 import RunState
from openlineage.client.serde import Serde

from sluice.clock import SimulatedClock
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.v1 import lineage_pb2, lineage_pb2_grpc
from sluice_services.lineage import http_api
from sluice_services.lineage.grpc_api import LineageServicer
from sluice_services.lineage.service import LineageService
from tests.integration.test_lineage_http import T0, clickstream_events, event, get, valid

pytestmark = pytest.mark.integration


@pytest.fixture
async def apis():
    """A gRPC stub and the HTTP app's base URL, both over one lineage service."""
    log = SqliteEventLog(":memory:", clock=SimulatedClock(T0))
    service = LineageService(log, SimulatedClock(T0))
    server = grpc.aio.server()
    lineage_pb2_grpc.add_LineageServicer_to_server(LineageServicer(service), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    runner = await http_api.serve(service, "127.0.0.1", 0)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield lineage_pb2_grpc.LineageStub(channel), f"http://127.0.0.1:{http_api.bound_port(runner)}", log
    await runner.cleanup()
    await server.stop(None)
    log.close()


async def record(stub, item) -> bool:
    """Record one run event through gRPC; whether it was a duplicate."""
    body = Serde.to_json(item).encode() if not isinstance(item, bytes) else item
    return (await stub.RecordEvent(lineage_pb2.RecordLineageEventRequest(event=body), timeout=5)).duplicate


async def status_of(call) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call
    return raised.value.code(), raised.value.details()


async def record_clickstream(stub) -> tuple[str, str, str]:
    schedule_run, us_run, uk_run, events = clickstream_events()
    for item in events:
        assert await record(stub, item) is False
    return schedule_run, us_run, uk_run


async def test_recorded_through_grpc_reads_back_through_grpc_and_http(apis):
    stub, url, log = apis
    schedule_run, us_run, uk_run = await record_clickstream(stub)
    jobs = await stub.ListJobs(lineage_pb2.ListLineageJobsRequest(namespace="experiments"), timeout=5)
    assert [j.name for j in jobs.jobs] == ["daily", "daily.metrics", "hourly", "hourly.metrics"]
    assert jobs.next_page_token == ""
    runs = await stub.ListRuns(lineage_pb2.ListLineageRunsRequest(parent_run_id=schedule_run), timeout=5)
    assert [(r.run_id, r.state) for r in runs.runs] == [(us_run, "COMPLETE"), (uk_run, "COMPLETE")]

    status, body = await asyncio.to_thread(get, f"{url}/api/v1/namespaces/experiments/jobs/hourly.metrics/runs")
    assert status == 200 and {run["id"] for run in body["runs"]} == {us_run, uk_run}

    position = log.head_position()
    again = event(RunState.START, us_run, "metrics", 1, (schedule_run, "hourly"))
    assert await record(stub, again) is True                       # a redelivery: nothing recorded
    assert log.head_position() == position


@pytest.mark.parametrize("body, field", [
    (b"{not json", "not JSON"),
    (b"[1, 2]", "event: must be a JSON object"),
    (json.dumps(valid(**{"run.runId": None})).encode(), "run.runId"),
    (json.dumps(valid(**{"job.name": ""})).encode(), "job.name"),
    (b"{" + b" " * (1024 * 1024) + b"}", "event: over 1048576 bytes"),
    (b'{"eventType": "START", "n": ' + b"9" * 5000 + b"}", "unusable JSON"),
])
async def test_a_malformed_event_is_invalid_argument_naming_the_field_and_nothing_is_stored(apis, body, field):
    stub, _, log = apis
    code, details = await status_of(record(stub, body))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and field in details, details
    assert log.head_position() == 0
    assert await record(stub, json.dumps(valid()).encode()) is False and log.head_position() == 1


async def test_get_job_by_fully_qualified_or_unique_simple_name_as_the_http_paths_resolve(apis):
    stub, url, _ = apis
    await record_clickstream(stub)
    await record(stub, event(RunState.START, str(uuid.uuid4()), "child", 0, (str(uuid.uuid4()), "parent")))

    def get_job(name):
        return stub.GetJob(lineage_pb2.GetLineageJobRequest(namespace="experiments", name=name), timeout=5)

    found = await get_job("hourly.metrics")
    assert (found.job.name, found.job.simple_name, found.job.parent_job_name, found.resolved) == \
        ("hourly.metrics", "metrics", "hourly", False)
    found = await get_job("child")                                  # HTTP: 301 to parent.child
    assert (found.job.name, found.resolved) == ("parent.child", True)
    status, body = await asyncio.to_thread(get, f"{url}/api/v1/namespaces/experiments/jobs/child")
    assert status == 301 and body["location"].endswith("/jobs/parent.child")

    code, details = await status_of(get_job("metrics"))            # HTTP: 300 with the candidates
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert "ambiguous" in details and "daily.metrics, hourly.metrics" in details
    code, details = await status_of(get_job("nope"))               # HTTP: 404
    assert code == grpc.StatusCode.NOT_FOUND and "'nope'" in details


@pytest.mark.parametrize("node, depth", [
    ("job:experiments:hourly.metrics", 2), ("job:experiments:hourly.metrics", 0),
    ("dataset:experiments:hourly_metrics", 1), ("dataset:experiments:hourly_metrics", None),
])
async def test_get_lineage_is_the_http_graph_of_the_same_node(apis, node, depth):
    stub, url, _ = apis
    await record_clickstream(stub)
    request = lineage_pb2.GetLineageRequest(node_id=node) if depth is None else \
        lineage_pb2.GetLineageRequest(node_id=node, depth=depth)
    answer = await stub.GetLineage(request, timeout=5)
    status, body = await asyncio.to_thread(get, f"{url}/api/v1/lineage?nodeId={node}"
                                                + ("" if depth is None else f"&depth={depth}"))
    assert status == 200
    graph = body["graph"]
    assert [n.id for n in answer.nodes] == [n["id"] for n in graph] and node in [n.id for n in answer.nodes]
    assert [n.type for n in answer.nodes] == [n["type"] for n in graph]
    for mine, theirs in zip(answer.nodes, graph):
        if mine.type == "JOB":
            assert (mine.job.namespace, mine.job.name, mine.job.simple_name) == \
                (theirs["data"]["namespace"], theirs["data"]["name"], theirs["data"]["simpleName"])
        else:
            assert (mine.dataset_namespace, mine.dataset_name) == (theirs["data"]["namespace"], theirs["data"]["name"])
    http_edges = sorted({(e["origin"], e["destination"]) for n in graph for e in n["inEdges"] + n["outEdges"]})
    assert [(e.origin, e.destination) for e in answer.edges] == http_edges and (depth == 0 or http_edges)


async def test_get_lineage_refuses_a_bad_depth_and_an_unknown_node(apis):
    stub, _, _ = apis
    await record_clickstream(stub)
    for depth in (-1, 101):
        code, details = await status_of(stub.GetLineage(
            lineage_pb2.GetLineageRequest(node_id="job:experiments:hourly", depth=depth), timeout=5))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("depth:"), details
    code, details = await status_of(stub.GetLineage(lineage_pb2.GetLineageRequest(node_id="job:experiments:nope"), timeout=5))
    assert code == grpc.StatusCode.NOT_FOUND and "node_id" in details


async def test_paging_through_2500_runs_returns_each_once_in_order(apis):
    stub, _, log = apis
    run_ids = [str(uuid.UUID(int=i)) for i in range(2_500)]
    for index in reversed(range(len(run_ids))):                    # recorded newest first; two per start
        assert await record(stub, event(RunState.START, run_ids[index], f"job{index % 3}", index // 2)) is False
    whole = await stub.ListRuns(lineage_pb2.ListLineageRunsRequest(page_size=10_000), timeout=10)
    assert [r.run_id for r in whole.runs] == run_ids and whole.next_page_token == ""

    pages, token = [], ""
    while True:
        answer = await stub.ListRuns(lineage_pb2.ListLineageRunsRequest(page_size=1_000, page_token=token), timeout=10)
        pages.append([r.run_id for r in answer.runs])
        if not (token := answer.next_page_token):
            break
    assert [len(p) for p in pages] == [1_000, 1_000, 500]
    assert [run_id for p in pages for run_id in p] == [r.run_id for r in whole.runs]

    first = await stub.ListRuns(lineage_pb2.ListLineageRunsRequest(page_size=1_000), timeout=10)
    late, early = str(uuid.UUID(int=10_000)), str(uuid.UUID(int=10_001))
    await record(stub, event(RunState.START, late, "job0", 5_000))                     # after the first page
    await record(stub, event(RunState.START, early, "job0", -1))                       # before it: not repeated
    rest, token = [], first.next_page_token
    while token:
        answer = await stub.ListRuns(lineage_pb2.ListLineageRunsRequest(page_size=1_000, page_token=token), timeout=10)
        rest.extend(r.run_id for r in answer.runs)
        token = answer.next_page_token
    assert [r.run_id for r in first.runs] + rest == [*run_ids, late]

    default = await stub.ListRuns(lineage_pb2.ListLineageRunsRequest(), timeout=10)
    assert len(default.runs) == 1_000 and default.next_page_token
    of_one_job = await stub.ListRuns(lineage_pb2.ListLineageRunsRequest(
        job_namespace="experiments", job_name="job1", page_size=500), timeout=10)
    rest = await stub.ListRuns(lineage_pb2.ListLineageRunsRequest(
        job_namespace="experiments", job_name="job1", page_size=500, page_token=of_one_job.next_page_token), timeout=10)
    assert [r.run_id for r in [*of_one_job.runs, *rest.runs]] == run_ids[1::3] and rest.next_page_token == ""
    assert log.head_position() == 2_502


async def test_list_jobs_pages_in_order(apis):
    stub, _, _ = apis
    for index in range(25):
        await record(stub, event(RunState.START, str(uuid.uuid4()), f"job{index:02d}", index))
    names, token = [], ""
    while True:
        answer = await stub.ListJobs(lineage_pb2.ListLineageJobsRequest(page_size=10, page_token=token), timeout=5)
        names.append([j.name for j in answer.jobs])
        if not (token := answer.next_page_token):
            break
    assert names == [[f"job{i:02d}" for i in range(s, min(s + 10, 25))] for s in (0, 10, 20)]


@pytest.mark.parametrize("request_, field", [
    (lineage_pb2.ListLineageRunsRequest(page_size=-1), "page_size:"),
    (lineage_pb2.ListLineageRunsRequest(page_token="not a token"), "page_token:"),
    (lineage_pb2.ListLineageRunsRequest(page_token="W10="), "page_token:"),                  # base64 of []
    (lineage_pb2.ListLineageJobsRequest(page_size=-5), "page_size:"),
    (lineage_pb2.ListLineageJobsRequest(page_token="eyJhIjoxfQ=="), "page_token:"),           # {"a":1}
])
async def test_a_bad_page_size_or_token_is_invalid_argument_naming_it(apis, request_, field):
    stub, _, _ = apis
    call = stub.ListRuns if isinstance(request_, lineage_pb2.ListLineageRunsRequest) else stub.ListJobs
    code, details = await status_of(call(request_, timeout=5))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith(field), details


async def test_a_token_of_list_jobs_is_refused_by_list_runs(apis):
    stub, _, _ = apis
    for index in range(3):
        await record(stub, event(RunState.START, str(uuid.uuid4()), f"job{index}", index))
    token = (await stub.ListJobs(lineage_pb2.ListLineageJobsRequest(page_size=1), timeout=5)).next_page_token
    assert token
    code, details = await status_of(stub.ListRuns(lineage_pb2.ListLineageRunsRequest(page_token=token), timeout=5))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("page_token:")

