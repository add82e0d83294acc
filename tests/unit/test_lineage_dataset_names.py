"""Dataset namespaces and names come back exactly as recorded: OpenLineage namespaces are URIs
(s3://bucket, postgres://db:5432) and names paths (warehouse/clicks), so neither "/" nor ":" may
separate them in memory; partition dimension values may contain "," "=" ":" and "/"; a control
character in a dataset's namespace or name is refused, naming the field."""
from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone

import grpc
import pytest
from aiohttp.test_utils import TestClient, TestServer

from sluice.clock import SimulatedClock
from sluice.domain.lineage import InvalidRunEvent, dataset_key, dataset_of, parse_run_event
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.v1 import lineage_pb2
from sluice_services.lineage import http_api
from sluice_services.lineage.grpc_api import LineageServicer
from sluice_services.lineage.service import LineageService

T0 = datetime(2026, 11, 22, 9, tzinfo=timezone.utc)
NS = "etl"
CLICKS = {"namespace": "s3://bucket", "name": "warehouse/clicks"}
ORDERS = {"namespace": "postgres://db:5432", "name": "public.orders"}
REPORT = {"namespace": "hdfs://nn:8020/warehouse", "name": "/data/report"}
TRICKY = "eu,west=1:a/b"                       # every character the old partition strings split on
INGEST_RUN = "0195499e-1a00-7000-8000-000000000001"
REPORT_RUN = "0195499e-1a00-7000-8000-000000000002"


def ol_event(run_id: str, job: str, seconds: int, inputs: list, outputs: list, event_type: str = "COMPLETE") -> dict:
    return {"eventType": event_type, "eventTime": (T0 + timedelta(seconds=seconds)).isoformat(),
            "producer": "https://example.com/tests", "run": {"runId": run_id},
            "job": {"namespace": NS, "name": job}, "inputs": inputs, "outputs": outputs}


def partitioned(dataset: dict, facets_key: str, condition_key: str, *dimensions: dict) -> dict:
    return {**dataset, facets_key: {"subset": {condition_key: {
        "type": "partition", "partitions": [{"dimensions": d} for d in dimensions]}}}}


EVENTS = [
    ol_event(INGEST_RUN, "ingest", 60,
             [partitioned(CLICKS, "inputFacets", "inputCondition", {"region": TRICKY, "day": "2026-11-22"})],
             [partitioned(ORDERS, "outputFacets", "outputCondition", {"k:1/2": "v,=x"})]),
    ol_event(REPORT_RUN, "report", 120, [ORDERS], [REPORT]),
]
INGEST_PARTITIONS = [                         # ordered by (namespace, name): postgres:// before s3://
    {**ORDERS, "dimensions": {"k:1/2": "v,=x"}},
    {**CLICKS, "dimensions": {"day": "2026-11-22", "region": TRICKY}},
]


def key(dataset: dict) -> str:
    return dataset_key(dataset["namespace"], dataset["name"])


@pytest.fixture
def log():
    log = SqliteEventLog(":memory:", clock=SimulatedClock(T0))
    yield log
    log.close()


@pytest.fixture
def service(log):
    return LineageService(log, SimulatedClock(T0))


@pytest.fixture
async def http(service):
    client = TestClient(TestServer(http_api.application(service)))
    await client.start_server()
    yield client
    await client.close()


def record(service: LineageService) -> None:
    for event in EVENTS:
        service.handle_message(json.dumps(event).encode())


class AbortingContext:
    """What grpc.aio's context does on abort: raise, with the code and details."""

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise RuntimeError(code, details)


# -- the key ----------------------------------------------------------------------------------

@pytest.mark.parametrize("namespace, name", [
    ("s3://bucket", "warehouse/clicks"), ("postgres://db:5432", "public.orders"),
    ("hdfs://nn:8020/warehouse", "/data/report"), ("a/b", "c"), ("a", "b/c"), ("x:", ":y"),
])
def test_a_dataset_key_gives_back_its_namespace_and_name(namespace, name):
    assert dataset_of(dataset_key(namespace, name)) == (namespace, name)


def test_keys_of_datasets_that_joined_by_a_slash_look_alike_differ():
    assert dataset_key("a/b", "c") != dataset_key("a", "b/c")


def test_keys_sort_by_namespace_then_name():
    pairs = [("a", "z"), ("a/b", "c"), ("a:", "b"), ("a", "b/c"), ("ab", "a"), ("a b", "x")]
    assert sorted(dataset_key(*p) for p in pairs) == [dataset_key(*p) for p in sorted(pairs)]


def test_a_key_cannot_be_made_with_the_separator_in_it():
    with pytest.raises(ValueError):
        dataset_key("s3://bucket\x1f", "clicks")


def test_parsed_datasets_and_partitions_keep_namespace_name_and_values_apart():
    r = parse_run_event(EVENTS[0])
    assert [dataset_of(d) for d in r.inputs] == [("s3://bucket", "warehouse/clicks")]
    assert [dataset_of(d) for d in r.outputs] == [("postgres://db:5432", "public.orders")]
    assert sorted(r.partitions) == sorted([(key(CLICKS), (("day", "2026-11-22"), ("region", TRICKY))),
                                           (key(ORDERS), (("k:1/2", "v,=x"),))])


@pytest.mark.parametrize("where, field", [
    (lambda e: e["inputs"][0].update(namespace="s3://bu\x1fcket"), "inputs[0].namespace"),
    (lambda e: e["inputs"][0].update(namespace="s3://bucket\n"), "inputs[0].namespace"),
    (lambda e: e["inputs"][0].update(name="ware\x00house"), "inputs[0].name"),
    (lambda e: e["outputs"][0].update(namespace="postgres://db\x7f:5432"), "outputs[0].namespace"),
    (lambda e: e["outputs"][0].update(name="public\torders"), "outputs[0].name"),
])
def test_a_control_character_in_a_dataset_namespace_or_name_is_refused_naming_the_field(where, field):
    event = json.loads(json.dumps(EVENTS[0]))
    where(event)
    with pytest.raises(InvalidRunEvent) as caught:
        parse_run_event(event)
    assert caught.value.field == field and "control character" in caught.value.reason


# -- the HTTP API -----------------------------------------------------------------------------

async def test_http_jobs_runs_and_lineage_answer_the_exact_namespaces_and_names(http):
    for event in EVENTS:
        response = await http.post("/api/v1/lineage", json=event)
        assert response.status == 201, await response.text()

    job = await (await http.get(f"/api/v1/namespaces/{NS}/jobs/ingest")).json()
    assert job["inputs"] == [CLICKS] and job["outputs"] == [ORDERS]
    assert job["latestRun"]["partitions"] == INGEST_PARTITIONS
    runs = (await (await http.get(f"/api/v1/namespaces/{NS}/jobs/ingest/runs")).json())["runs"]
    assert [(r["id"], r["inputs"], r["outputs"], r["partitions"]) for r in runs] == \
        [(INGEST_RUN, [CLICKS], [ORDERS], INGEST_PARTITIONS)]
    report = await (await http.get(f"/api/v1/namespaces/{NS}/jobs/report")).json()
    assert report["inputs"] == [ORDERS] and report["outputs"] == [REPORT]

    response = await http.get("/api/v1/lineage?nodeId=dataset:s3://bucket:warehouse/clicks&depth=5")
    assert response.status == 200, await response.text()
    graph = {node["id"]: node for node in (await response.json())["graph"]}
    datasets = {"dataset:s3://bucket:warehouse/clicks": CLICKS, "dataset:postgres://db:5432:public.orders": ORDERS,
                "dataset:hdfs://nn:8020/warehouse:/data/report": REPORT}
    assert set(graph) == {*datasets, f"job:{NS}:ingest", f"job:{NS}:report"}
    for node_id, dataset in datasets.items():
        assert graph[node_id]["type"] == "DATASET" and graph[node_id]["data"]["id"] == dataset
    assert graph[f"job:{NS}:ingest"]["data"]["inputs"] == [CLICKS]
    assert graph["dataset:postgres://db:5432:public.orders"]["inEdges"] == [
        {"origin": f"job:{NS}:ingest", "destination": "dataset:postgres://db:5432:public.orders"}]
    assert graph["dataset:postgres://db:5432:public.orders"]["outEdges"] == [
        {"origin": "dataset:postgres://db:5432:public.orders", "destination": f"job:{NS}:report"}]

    for missing in ("dataset:s3:/bucket/warehouse/clicks", "dataset:s3://bucket/warehouse:clicks",
                    "dataset:s3://bucket:warehouse/clicks\x1f"):
        assert (await http.get("/api/v1/lineage", params={"nodeId": missing})).status == 404


@pytest.mark.parametrize("field", ["inputs[0].namespace", "outputs[0].name"])
async def test_http_refuses_a_control_character_naming_the_field_and_stores_nothing(http, log, field):
    event = json.loads(json.dumps(EVENTS[0]))
    if field == "inputs[0].namespace":
        event["inputs"][0]["namespace"] = "s3://bucket\x1f"
    else:
        event["outputs"][0]["name"] = "public.\x00orders"
    response = await http.post("/api/v1/lineage", json=event)
    assert response.status == 422 and field in (await response.json())["error"]   # as every invalid event
    assert log.head_position() == 0


# -- the gRPC API -----------------------------------------------------------------------------

async def test_grpc_lineage_and_runs_answer_the_exact_namespaces_and_names(service):
    servicer = LineageServicer(service)
    for event in EVENTS:
        await servicer.RecordEvent(lineage_pb2.RecordLineageEventRequest(event=json.dumps(event).encode()), None)

    answer = await servicer.GetLineage(lineage_pb2.GetLineageRequest(
        node_id="dataset:postgres://db:5432:public.orders", depth=1), None)
    assert {n.id: (n.dataset_namespace, n.dataset_name) for n in answer.nodes if n.type == "DATASET"} == \
        {"dataset:postgres://db:5432:public.orders": ("postgres://db:5432", "public.orders")}
    answer = await servicer.GetLineage(lineage_pb2.GetLineageRequest(
        node_id="dataset:s3://bucket:warehouse/clicks", depth=5), None)
    assert {(n.dataset_namespace, n.dataset_name) for n in answer.nodes if n.type == "DATASET"} == \
        {(d["namespace"], d["name"]) for d in (CLICKS, ORDERS, REPORT)}

    runs = await servicer.ListRuns(lineage_pb2.ListLineageRunsRequest(job_namespace=NS, job_name="ingest"), None)
    # LineageRun.inputs/outputs are "namespace/name" strings for reading: no control character leaks
    assert [(list(r.inputs), list(r.outputs)) for r in runs.runs] == \
        [(["s3://bucket/warehouse/clicks"], ["postgres://db:5432/public.orders"])]
    assert [([(d.namespace, d.name) for d in r.input_datasets], [(d.namespace, d.name) for d in r.output_datasets])
            for r in runs.runs] == [([("s3://bucket", "warehouse/clicks")], [("postgres://db:5432", "public.orders")])]


async def test_grpc_refuses_a_control_character_naming_the_field(service, log):
    event = json.loads(json.dumps(EVENTS[0]))
    event["inputs"][0]["namespace"] = "s3://\x01bucket"
    with pytest.raises(RuntimeError) as caught:
        await LineageServicer(service).RecordEvent(
            lineage_pb2.RecordLineageEventRequest(event=json.dumps(event).encode()), AbortingContext())
    code, details = caught.value.args
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "inputs[0].namespace" in details
    assert log.head_position() == 0


# -- the log ----------------------------------------------------------------------------------

def test_the_log_keeps_the_raw_events_and_a_refold_rebuilds_the_same_keys(log, service):
    record(service)
    recorded = [json.loads(e.data) for e in log.read_all(after=0, limit=100)]
    assert [e["inputs"][0]["namespace"] for e in recorded] == ["s3://bucket", "postgres://db:5432"]
    again = LineageService(log, SimulatedClock(T0))
    again.rebuild()
    assert again.state == service.state
    assert dict(again.state.runs) == dict(service.state.runs)
    assert again.state.jobs_of(key(ORDERS)) == (((NS, "report"),), ((NS, "ingest"),))
