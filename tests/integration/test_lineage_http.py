"""The lineage HTTP API on loopback: the real openlineage-python client posts through its HTTP
transport (gzip, API key), children before parents; the Marquez-compatible read API answers with
fully qualified names, redirects a unique simple name (301), lists an ambiguous one (300), and
bad input is a 4xx with the reason and stores nothing."""
from __future__ import annotations

import asyncio
import gzip
import json
import urllib.error
import urllib.request
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from openlineage.client import OpenLineageClient
from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.facet_v2 import parent_run
from openlineage.client.transport.http import ApiKeyTokenProvider, HttpCompression, HttpConfig, HttpTransport

from sluice.clock import SimulatedClock
from sluice.eventlog.sqlite import SqliteEventLog
from sluice_services.lineage import http_api
from sluice_services.lineage.service import LineageService

pytestmark = pytest.mark.integration

TOKEN = "s3cret"
T0 = datetime(2026, 11, 22, 9, tzinfo=timezone.utc)
PRODUCER = "https://example.com/tests"


@pytest.fixture
async def api(tmp_path):
    log = SqliteEventLog(tmp_path / "events.db", clock=SimulatedClock(T0))
    service = LineageService(log, SimulatedClock(T0))
    runner = await http_api.serve(service, "127.0.0.1", 0, TOKEN)
    yield f"http://127.0.0.1:{http_api.bound_port(runner)}", log
    await runner.cleanup()
    log.close()


def client(url: str) -> OpenLineageClient:
    return OpenLineageClient(transport=HttpTransport(HttpConfig(
        url=url, compression=HttpCompression.GZIP, auth=ApiKeyTokenProvider({"apiKey": TOKEN}))))


def event(state: RunState, run_id: str, job: str, minutes: int, parent: tuple[str, str] | None = None,
          inputs=(), outputs=()) -> RunEvent:
    facets = {}
    if parent:
        facets["parent"] = parent_run.ParentRunFacet(run=parent_run.Run(runId=parent[0]),
                                                     job=parent_run.Job(namespace="experiments", name=parent[1]))
    return RunEvent(eventType=state, eventTime=(T0 + timedelta(minutes=minutes)).isoformat(), producer=PRODUCER,
                    run=Run(runId=run_id, facets=facets), job=Job(namespace="experiments", name=job),
                    inputs=[InputDataset(namespace="experiments", name=i) for i in inputs],
                    outputs=[OutputDataset(namespace="experiments", name=o) for o in outputs])


def get(url: str) -> tuple[int, dict]:
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    try:
        reading = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})  # reads need it too
        with urllib.request.build_opener(NoRedirect).open(reading, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        body = error.read()
        return error.code, {"location": error.headers.get("Location"), **(json.loads(body) if body.startswith(b"{") else {})}


def post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict]:
    request = urllib.request.Request(f"{url}/api/v1/lineage", data=body, method="POST",
                                     headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def clickstream_events() -> tuple[str, str, str, list]:
    """(schedule run, US run, UK run, events): an hourly schedule run with two program runs and an
    unrelated daily one; children first, COMPLETE before START: the stored state must not care."""
    schedule_run, us_run, uk_run, other_run = (str(uuid.uuid4()) for _ in range(4))
    return schedule_run, us_run, uk_run, [
        event(RunState.COMPLETE, us_run, "metrics", 5, (schedule_run, "hourly"), ["clickstream"], ["hourly_metrics"]),
        event(RunState.START, us_run, "metrics", 1, (schedule_run, "hourly")),
        event(RunState.COMPLETE, uk_run, "metrics", 6, (schedule_run, "hourly"), ["clickstream"], ["hourly_metrics"]),
        event(RunState.START, schedule_run, "hourly", 0),
        event(RunState.COMPLETE, schedule_run, "hourly", 7),
        event(RunState.COMPLETE, other_run, "metrics", 9, (str(uuid.uuid4()), "daily"), ["hourly_metrics"], ["daily"]),
    ]


async def test_the_openlineage_client_posts_and_the_marquez_paths_read_back(api):
    url, _ = api
    schedule_run, us_run, uk_run, events = clickstream_events()
    emitter = client(url)
    for item in events:
        await asyncio.to_thread(emitter.emit, item)

    status, listed = await asyncio.to_thread(get, f"{url}/api/v1/namespaces/experiments/jobs")
    assert status == 200
    jobs = {job["name"]: job for job in listed["jobs"]}
    assert set(jobs) == {"hourly", "hourly.metrics", "daily", "daily.metrics"}
    assert jobs["hourly.metrics"]["simpleName"] == "metrics" and jobs["hourly.metrics"]["parentJobName"] == "hourly"
    assert jobs["hourly.metrics"]["inputs"] == [{"namespace": "experiments", "name": "clickstream"}]

    status, runs = await asyncio.to_thread(get, f"{url}/api/v1/namespaces/experiments/jobs/hourly.metrics/runs")
    assert status == 200 and {run["id"] for run in runs["runs"]} == {us_run, uk_run}
    assert {run["state"] for run in runs["runs"]} == {"COMPLETED"} and {r["parentRunId"] for r in runs["runs"]} == {schedule_run}

    status, body = await asyncio.to_thread(get, f"{url}/api/v1/namespaces/experiments/jobs/hourly")
    assert status == 200 and body["latestRun"]["state"] == "COMPLETED"
    status, body = await asyncio.to_thread(get, f"{url}/api/v1/namespaces/experiments/jobs/metrics")
    assert status == 300 and [c["name"] for c in body["candidates"]] == ["daily.metrics", "hourly.metrics"]

    status, body = await asyncio.to_thread(get, f"{url}/api/v1/lineage?nodeId=job:experiments:hourly.metrics&depth=2")
    assert status == 200
    nodes = {node["id"] for node in body["graph"]}
    assert nodes == {"job:experiments:hourly.metrics", "dataset:experiments:clickstream",
                     "dataset:experiments:hourly_metrics", "job:experiments:daily.metrics"}
    status, _ = await asyncio.to_thread(get, f"{url}/api/v1/lineage?nodeId=job:experiments:nope&depth=2")
    assert status == 404


async def test_a_unique_simple_name_redirects_to_the_fully_qualified_job(api):
    url, _ = api
    await asyncio.to_thread(client(url).emit, event(RunState.START, str(uuid.uuid4()), "child", 0,
                                                    (str(uuid.uuid4()), "parent")))
    status, body = await asyncio.to_thread(get, f"{url}/api/v1/namespaces/experiments/jobs/child/runs")
    assert status == 301 and body["location"] == "/api/v1/namespaces/experiments/jobs/parent.child/runs"


def valid(**changes) -> dict:
    body = {"eventType": "START", "eventTime": T0.isoformat(), "producer": PRODUCER,
            "run": {"runId": str(uuid.uuid4())}, "job": {"namespace": "experiments", "name": "job"}}
    for path, value in changes.items():
        target = body
        *parents, leaf = path.split(".")
        for parent in parents:
            target = target[parent]
        if value is None:
            del target[leaf]
        else:
            target[leaf] = value
    return body


@pytest.mark.parametrize("body, headers, status, reason", [
    (b"{not json", {}, 400, "not JSON"),
    (b"\xff\xfe{}", {}, 400, "not JSON"),
    (b"[" * 100_000, {}, 400, "nested too deeply"),
    (b"[1, 2]", {}, 422, "event: must be a JSON object"),
    (json.dumps(valid(**{"run.runId": None})).encode(), {}, 422, "run.runId"),
    (json.dumps(valid(**{"job.name": ""})).encode(), {}, 422, "job.name"),
    (b"{" + b" " * (2 * 1024 * 1024) + b"}", {}, 413, "body over"),
    (gzip.compress(b" " * (3 * 1024 * 1024)), {"Content-Encoding": "gzip"}, 413, "once decompressed"),
    (b"\x1f\x8b garbage", {"Content-Encoding": "gzip"}, 400, "not gzip"),
    (json.dumps(valid()).encode(), {"Authorization": "Bearer wrong"}, 401, "bearer token"),
    (json.dumps(valid()).encode(), {"Authorization": None}, 401, "bearer token"),
    (json.dumps(valid()).encode(), {"Content-Type": "text/plain"}, 415, "Content-Type: application/json is required"),
])
async def test_bad_input_is_a_4xx_with_the_reason_and_nothing_is_stored(api, body, headers, status, reason):
    url, log = api
    sent = {"Authorization": f"Bearer {TOKEN}", **headers}
    sent = {k: v for k, v in sent.items() if v is not None}
    code, answer = await asyncio.to_thread(post, url, body, sent)
    assert code == status and reason in answer["error"], answer
    assert log.head_position() == 0
    code, _ = await asyncio.to_thread(post, url, json.dumps(valid()).encode(), {"Authorization": f"Bearer {TOKEN}"})
    assert code == 201 and log.head_position() == 1
