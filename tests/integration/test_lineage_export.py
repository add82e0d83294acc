"""With openlineage_url set, the lineage service also sends every event of the lineage topic to that
OpenLineage backend through the openlineage-python HTTP transport: here a real aiohttp server on
loopback records what it receives (schedule run -> program run -> Spark application, parent facets)."""
from __future__ import annotations

import json
from datetime import timedelta

import pytest
import requests
from aiohttp import web
from openlineage.client.event_v2 import RunState

from sluice.bus.port import Record
from sluice.bus.topics import LINEAGE
from sluice.clock import SimulatedClock
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.runtime.errors import MalformedMessage
from sluice_services.composition import Settings, lineage_spec
from sluice_services.config import ConfigError, resolve
from sluice_services.launcher import lineage_events
from sluice_services.lineage.export import EXPORT_GROUP, OpenLineageExport
from tests.unit.test_lineage_hierarchy import T0, clickstream_runs, spark_application

pytestmark = pytest.mark.integration
API_KEY = "backend-key"


@pytest.fixture
async def backend():
    """An OpenLineage backend that records each request; answers `status` (201 unless changed)."""
    received: list[tuple[dict, dict]] = []
    answer = {"status": 201}

    async def lineage(request: web.Request) -> web.Response:
        received.append((dict(request.headers), await request.json()))
        return web.json_response({}, status=answer["status"])

    app = web.Application()
    app.add_routes([web.post("/api/v1/lineage", lineage)])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}", received, answer
    await runner.cleanup()


def record(value: bytes, offset: int) -> Record:
    return Record(LINEAGE, 0, offset, None, value, (), 0)


async def test_every_event_of_sluices_runs_reaches_the_configured_backend_with_its_parents(tmp_path, backend):
    url, received, _ = backend
    run = clickstream_runs()[0]
    attempt_dir = tmp_path / "runs" / run.id
    spark_run = spark_application(run, attempt_dir, True)
    messages = [*lineage_events.run_started(run, T0),
                *lineage_events.run_ended(run, RunState.COMPLETE, T0 + timedelta(minutes=5), attempt_dir)]
    log = SqliteEventLog(":memory:", clock=SimulatedClock(T0))
    spec = lineage_spec(log, SimulatedClock(T0), Settings(openlineage_url=url, openlineage_api_key=API_KEY))
    handlers = {s.group: s.handlers[LINEAGE] for s in spec.subscriptions}
    assert set(handlers) == {"lineage", EXPORT_GROUP}

    for offset, message in enumerate(messages):
        for handler in handlers.values():
            await handler(record(message, offset))

    assert [event for _, event in received] == [json.loads(m) for m in messages]
    assert {headers["Authorization"] for headers, _ in received} == {f"Bearer {API_KEY}"}
    parents = {event["run"]["runId"]: (event["job"]["name"], (event["run"]["facets"].get("parent") or {}))
               for _, event in received}
    job_id = run.job.id
    assert parents[job_id] == ("clickstream.hourly_metrics_on_arrival", {})
    assert parents[run.id][1]["run"]["runId"] == job_id
    spark_name, spark_parent = parents[spark_run]
    assert spark_name == "clickstream.hourly_metrics_on_arrival.hourly_metrics.spark"
    assert (spark_parent["run"]["runId"], spark_parent["root"]["run"]["runId"]) == (run.id, job_id)
    assert {e["eventType"] for _, e in received if e["run"]["runId"] == spark_run} == {"START", "COMPLETE"}
    log.close()


async def test_an_event_the_backend_refuses_fails_the_handler_so_it_is_dead_lettered(backend):
    url, _, answer = backend
    answer["status"] = 400
    export = OpenLineageExport(url)
    with pytest.raises(requests.HTTPError):
        await export.on_lineage_event(record(lineage_events.run_started(clickstream_runs()[0], T0)[0], 0))
    with pytest.raises(MalformedMessage, match="not JSON"):
        await export.on_lineage_event(record(b"{nope", 1))


def test_the_backend_url_is_a_setting_checked_when_read():
    settings = resolve({}, {"SLUICE_OPENLINEAGE_URL": "http://marquez:5000", "SLUICE_OPENLINEAGE_API_KEY": "k"},
                       service="lineage")
    assert (settings.openlineage_url, settings.openlineage_api_key) == ("http://marquez:5000", "k")
    assert resolve({}, {}, service="lineage").openlineage_url == ""
    with pytest.raises(ConfigError, match="openlineage"):
        resolve({"openlineage_url": "marquez:5000"}, {}, service="lineage")
