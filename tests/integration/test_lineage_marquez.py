"""The Marquez paths the Marquez web UI calls (web/src/store/requests/*.ts), over loopback HTTP,
with the response shapes its types (web/src/types/api.ts, lineage.ts) read: namespaces, jobs and
runs with facets, datasets and their versions, search, the lineage graph (asked with the UI's
trailing slash), run facets and the lineage events. Seed 002: a child job lives in its parent's
namespace, and asking for it under its own answers 301 there. Listings page by limit/offset;
hostile parameters are a 400 naming the parameter, unknown things a 404."""
from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from sluice.clock import SimulatedClock
from sluice.eventlog.sqlite import SqliteEventLog
from sluice_services.lineage import http_api
from sluice_services.lineage.service import LineageService

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 22, 9, tzinfo=timezone.utc)
PRODUCER = "https://example.com/tests"
SCHEMA = {"_producer": PRODUCER, "_schemaURL": "https://openlineage.io/spec/facets/1-1-1/SchemaDatasetFacet.json",
          "fields": [{"name": "user_id", "type": "STRING"}, {"name": "clicks", "type": "BIGINT"}]}
SOURCE = {"_producer": PRODUCER, "_schemaURL": "https://openlineage.io/spec/facets/1-0-0/SourceCodeJobFacet.json",
          "language": "python", "sourceCode": "print('metrics')"}

SCHEDULE_RUN, US_RUN, UK_RUN = (str(uuid.uuid4()) for _ in range(3))


def event(kind: str, run_id: str, namespace: str, job: str, minutes: int, parent: str | None = None,
          inputs=(), outputs=(), job_facets=None) -> dict:
    run_facets = {"nominalTime": {"_producer": PRODUCER, "_schemaURL": "https://openlineage.io/nominal",
                                  "nominalStartTime": T0.isoformat()}}
    if parent:
        run_facets["parent"] = {"_producer": PRODUCER, "_schemaURL": "https://openlineage.io/parent",
                                "run": {"runId": parent}, "job": {"namespace": "experiments", "name": "hourly"}}
    return {"eventType": kind, "eventTime": (T0 + timedelta(minutes=minutes)).isoformat(), "producer": PRODUCER,
            "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
            "run": {"runId": run_id, "facets": run_facets},
            "job": {"namespace": namespace, "name": job, "facets": job_facets or {}},
            "inputs": [{"namespace": "warehouse", "name": name} for name in inputs],
            "outputs": [{"namespace": "warehouse", "name": name, "facets": {"schema": SCHEMA}} for name in outputs]}


EVENTS = [   # the hourly schedule in `experiments`; its program's runs say namespace `spark`
    event("START", SCHEDULE_RUN, "experiments", "hourly", 0),
    event("START", US_RUN, "spark", "metrics", 1, SCHEDULE_RUN, ["clickstream"], job_facets={"sourceCode": SOURCE}),
    event("COMPLETE", US_RUN, "spark", "metrics", 5, SCHEDULE_RUN, ["clickstream"], ["hourly_metrics"]),
    event("START", UK_RUN, "spark", "metrics", 6, SCHEDULE_RUN, ["clickstream"], job_facets={"sourceCode": SOURCE}),
    event("FAIL", UK_RUN, "spark", "metrics", 8, SCHEDULE_RUN, ["clickstream"], ["hourly_metrics"]),
    event("COMPLETE", SCHEDULE_RUN, "experiments", "hourly", 9),
]


@pytest.fixture
async def url(tmp_path):
    log = SqliteEventLog(tmp_path / "events.db", clock=SimulatedClock(T0))
    service = LineageService(log, SimulatedClock(T0))
    for item in EVENTS:
        service.handle_message(json.dumps(item).encode())
    runner = await http_api.serve(service, "127.0.0.1", 0)
    yield f"http://127.0.0.1:{http_api.bound_port(runner)}"
    await runner.cleanup()
    log.close()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def get(url: str, follow: bool = False) -> tuple[int, dict]:
    opener = urllib.request.build_opener() if follow else urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        body = error.read()
        return error.code, {"location": error.headers.get("Location"), **(json.loads(body) if body.startswith(b"{") else {})}


async def call(path: str, base: str, follow: bool = False) -> tuple[int, dict]:
    import asyncio
    return await asyncio.to_thread(get, base + path, follow)


NAMESPACE_KEYS = {"name", "createdAt", "updatedAt", "ownerName", "description", "isHidden"}
JOB_KEYS = {"id", "type", "name", "simpleName", "parentJobName", "createdAt", "updatedAt", "namespace", "inputs",
            "outputs", "location", "description", "latestRun", "tags", "facets"}
RUN_KEYS = {"id", "createdAt", "updatedAt", "nominalStartTime", "nominalEndTime", "state", "jobVersion", "startedAt",
            "endedAt", "durationMs", "args", "facets"}
DATASET_KEYS = {"id", "type", "name", "physicalName", "createdAt", "updatedAt", "namespace", "sourceName", "fields",
                "tags", "lastModifiedAt", "description", "facets", "deleted", "columnLineage"}
VERSION_KEYS = DATASET_KEYS - {"deleted", "columnLineage"} | {"version", "createdByRun", "lifecycleState"}


async def test_namespaces_list_where_jobs_live_and_where_datasets_are(url):
    status, body = await call("/api/v1/namespaces", url)
    assert status == 200 and [n["name"] for n in body["namespaces"]] == ["experiments", "warehouse"]
    assert all(NAMESPACE_KEYS <= set(n) for n in body["namespaces"])
    experiments = body["namespaces"][0]
    assert experiments["createdAt"] == "2026-11-22T09:00:00Z" and experiments["updatedAt"] == "2026-11-22T09:09:00Z"
    status, one = await call("/api/v1/namespaces/experiments", url)
    assert status == 200 and one == experiments
    status, body = await call("/api/v1/namespaces/spark", url)          # its jobs live in experiments
    assert status == 404 and body["code"] == 404 and "spark" in body["message"]


async def test_a_child_job_lives_in_its_parents_namespace_and_its_own_redirects_there(url):
    status, body = await call("/api/v1/namespaces/experiments/jobs?limit=700", url)
    assert status == 200 and body["totalCount"] == 2
    jobs = {job["name"]: job for job in body["jobs"]}
    assert set(jobs) == {"hourly", "hourly.metrics"} and all(JOB_KEYS <= set(job) for job in jobs.values())
    child = jobs["hourly.metrics"]
    assert child["id"] == {"namespace": "experiments", "name": "hourly.metrics"} and child["namespace"] == "experiments"
    assert (child["simpleName"], child["parentJobName"], child["ownNamespace"]) == ("metrics", "hourly", "spark")
    assert child["inputs"] == [{"namespace": "warehouse", "name": "clickstream"}]
    assert child["latestRun"]["id"] == UK_RUN and child["latestRun"]["state"] == "FAILED"

    status, body = await call("/api/v1/namespaces/spark/jobs", url)
    assert status == 200 and body == {"totalCount": 0, "jobs": []}
    for suffix in ("", "/runs"):
        status, body = await call(f"/api/v1/namespaces/spark/jobs/hourly.metrics{suffix}", url)
        assert status == 301 and body["location"] == f"/api/v1/namespaces/experiments/jobs/hourly.metrics{suffix}"
        status, body = await call(f"/api/v1/namespaces/spark/jobs/metrics{suffix}", url)   # a simple name too
        assert status == 301 and body["location"] == f"/api/v1/namespaces/experiments/jobs/hourly.metrics{suffix}"
    status, body = await call("/api/v1/namespaces/spark/jobs/hourly.metrics", url, follow=True)
    assert status == 200 and body["name"] == "hourly.metrics"
    assert body["facets"]["sourceCode"]["sourceCode"] == "print('metrics')"
    status, body = await call("/api/v1/namespaces/experiments/jobs/nope", url)
    assert status == 404 and "'nope'" in body["message"]


async def test_runs_newest_first_with_marquez_states_durations_and_facets_paged(url):
    status, body = await call("/api/v1/namespaces/experiments/jobs/hourly.metrics/runs", url)
    assert status == 200 and body["totalCount"] == 2
    runs = body["runs"]
    assert [(r["id"], r["state"], r["durationMs"]) for r in runs] == [(UK_RUN, "FAILED", 120_000),
                                                                      (US_RUN, "COMPLETED", 240_000)]
    assert all(RUN_KEYS <= set(run) for run in runs)
    assert runs[1]["startedAt"] == "2026-11-22T09:01:00Z" and runs[1]["endedAt"] == "2026-11-22T09:05:00Z"
    assert runs[0]["facets"]["nominalTime"]["nominalStartTime"] == T0.isoformat()
    assert runs[0]["jobVersion"]["name"] == "hourly.metrics"
    status, body = await call("/api/v1/namespaces/experiments/jobs/hourly.metrics/runs?limit=1&offset=1", url)
    assert status == 200 and body["totalCount"] == 2 and [r["id"] for r in body["runs"]] == [US_RUN]
    status, body = await call(f"/api/v1/jobs/runs/{US_RUN.upper()}", url)
    assert status == 200 and body["id"] == US_RUN and body["state"] == "COMPLETED"


async def test_run_and_job_facets_of_a_run(url):
    status, body = await call(f"/api/v1/jobs/runs/{US_RUN}/facets?type=job", url)
    assert status == 200 and body["runId"] == US_RUN and body["facets"]["sourceCode"] == SOURCE
    status, body = await call(f"/api/v1/jobs/runs/{US_RUN}/facets?type=run", url)
    assert status == 200 and set(body["facets"]) == {"nominalTime", "parent"}
    status, body = await call(f"/api/v1/jobs/runs/{US_RUN}/facets?type=dataset", url)
    assert status == 400 and body["message"].startswith("type: must be one of RUN, JOB")
    status, body = await call(f"/api/v1/jobs/runs/{uuid.uuid4()}/facets", url)
    assert status == 404 and "no run" in body["message"]


async def test_datasets_their_fields_and_one_version_per_run_that_wrote_them(url):
    status, body = await call("/api/v1/namespaces/warehouse/datasets?limit=20&offset=0", url)
    assert status == 200 and body["totalCount"] == 2
    assert [d["name"] for d in body["datasets"]] == ["clickstream", "hourly_metrics"]
    assert all(DATASET_KEYS <= set(d) for d in body["datasets"])
    status, body = await call("/api/v1/namespaces/warehouse/datasets?limit=1&offset=1", url)
    assert [d["name"] for d in body["datasets"]] == ["hourly_metrics"]

    status, dataset = await call("/api/v1/namespaces/warehouse/datasets/hourly_metrics", url)
    assert status == 200 and dataset["id"] == {"namespace": "warehouse", "name": "hourly_metrics"}
    assert [(f["name"], f["type"]) for f in dataset["fields"]] == [("user_id", "STRING"), ("clicks", "BIGINT")]
    assert dataset["facets"]["schema"] == SCHEMA and dataset["type"] == "DB_TABLE"

    status, body = await call("/api/v1/namespaces/warehouse/datasets/hourly_metrics/versions?limit=100&offset=0", url)
    assert status == 200 and body["totalCount"] == 2
    versions = body["versions"]
    assert all(VERSION_KEYS <= set(v) for v in versions)
    assert [v["createdByRun"]["id"] for v in versions] == [UK_RUN, US_RUN]
    assert versions[0]["id"] == {"namespace": "warehouse", "name": "hourly_metrics", "version": versions[0]["version"]}
    assert dataset["currentVersion"] == versions[0]["version"] and versions[0]["version"] != versions[1]["version"]
    assert versions[1]["fields"][0]["name"] == "user_id" and versions[1]["createdAt"] == "2026-11-22T09:05:00Z"
    status, body = await call("/api/v1/namespaces/warehouse/datasets/nope/versions", url)
    assert status == 404 and "'nope'" in body["message"]


async def test_search_finds_jobs_and_datasets_by_part_of_their_name(url):
    status, body = await call("/api/v1/search/?q=metric&sort=NAME&limit=100", url, follow=True)  # the UI's slash
    assert status == 200 and body["totalCount"] == 2
    assert [(r["type"], r["namespace"], r["name"], r["nodeId"]) for r in body["results"]] == [
        ("JOB", "experiments", "hourly.metrics", "job:experiments:hourly.metrics"),
        ("DATASET", "warehouse", "hourly_metrics", "dataset:warehouse:hourly_metrics")]
    assert all(r["updatedAt"] for r in body["results"])
    status, body = await call("/api/v1/search?q=HOURLY&filter=DATASET", url)
    assert [r["name"] for r in body["results"]] == ["hourly_metrics"]
    status, body = await call("/api/v1/search?q=hourly&sort=UPDATE_AT&limit=1", url)
    assert body["totalCount"] == 1 and body["results"][0]["name"] == "hourly"         # updated last, at 09:09
    for query, message in (("", "q: a text to search for is required"), ("q=x&filter=RUN", "filter: must be one of"),
                           ("q=x&sort=size", "sort: must be one of"), ("q=x&limit=-1", "limit: must be from 0")):
        status, body = await call(f"/api/v1/search?{query}", url)
        assert status == 400 and body["message"].startswith(message), body


async def test_the_lineage_graph_as_the_ui_asks_names_jobs_where_they_live(url):
    status, body = await call("/api/v1/lineage/?nodeId=job:experiments:hourly.metrics&depth=2", url, follow=True)
    assert status == 200
    graph = {node["id"]: node for node in body["graph"]}
    assert set(graph) == {"job:experiments:hourly.metrics", "dataset:warehouse:clickstream",
                          "dataset:warehouse:hourly_metrics"}
    job = graph["job:experiments:hourly.metrics"]
    assert job["type"] == "JOB" and JOB_KEYS <= set(job["data"]) and job["data"]["latestRun"]["state"] == "FAILED"
    dataset = graph["dataset:warehouse:hourly_metrics"]
    assert dataset["type"] == "DATASET" and DATASET_KEYS <= set(dataset["data"])
    assert dataset["inEdges"] == [{"origin": "job:experiments:hourly.metrics",
                                   "destination": "dataset:warehouse:hourly_metrics"}]
    status, same = await call("/api/v1/lineage?nodeId=job:spark:hourly.metrics&depth=2", url)  # its own namespace
    assert status == 200 and same == body


async def test_lineage_events_newest_first_filtered_and_paged(url):
    status, body = await call("/api/v1/events/lineage?limit=100&before=&after=&sortDirection=desc", url)
    assert status == 200 and body["totalCount"] == len(EVENTS)
    assert [(e["eventType"], e["eventTime"]) for e in body["events"]] == \
        [(e["eventType"], e["eventTime"]) for e in sorted(EVENTS, key=lambda e: e["eventTime"], reverse=True)]
    assert body["events"][0]["run"]["runId"] == SCHEDULE_RUN and "facets" in body["events"][0]["job"]
    status, body = await call("/api/v1/events/lineage?limit=2&offset=1&sortDirection=asc", url)
    assert [e["eventTime"] for e in body["events"]] == [EVENTS[1]["eventTime"], EVENTS[2]["eventTime"]]
    after = (T0 + timedelta(minutes=6)).isoformat().replace("+00:00", "Z")
    status, body = await call(f"/api/v1/events/lineage?after={after}", url)
    assert body["totalCount"] == 3
    status, body = await call("/api/v1/events/lineage?before=yesterday", url)
    assert status == 400 and body["message"].startswith("before: an ISO 8601 date-time is required")


@pytest.mark.parametrize("query, message", [
    ("limit=abc", "limit: a whole number from 0 to 10000 is required, got 'abc'"),
    ("limit=-1", "limit: must be from 0 to 10000, got -1"),
    ("limit=10001", "limit: must be from 0 to 10000, got 10001"),
    ("offset=-5", "offset: must be from 0, got -5"),
    ("offset=1e3", "offset: a whole number from 0 is required, got '1e3'"),
])
@pytest.mark.parametrize("path", [
    "/api/v1/namespaces", "/api/v1/namespaces/experiments/jobs", "/api/v1/namespaces/experiments/jobs/hourly/runs",
    "/api/v1/namespaces/warehouse/datasets", "/api/v1/namespaces/warehouse/datasets/clickstream/versions",
    "/api/v1/events/lineage",
])
async def test_a_bad_page_is_a_400_naming_the_parameter(url, path, query, message):
    status, body = await call(f"{path}?{query}", url)
    assert status == 400 and body == {"code": 400, "message": message, "error": message, "location": None}
