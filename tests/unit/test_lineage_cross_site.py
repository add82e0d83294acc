"""A web page cannot record lineage events: a browser sends a POST whose body is text/plain, a form
or untyped cross-site without asking the server first (a CORS "simple request"), Host and all, so
POST /api/v1/lineage takes application/json only (as Marquez does) and refuses the rest with 415,
authorization on or off."""
from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone

import pytest
from aiohttp.test_utils import TestClient, TestServer

from sluice.clock import SimulatedClock
from sluice.eventlog.sqlite import SqliteEventLog
from sluice_services.lineage import http_api
from sluice_services.lineage.service import LineageService

T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)
PAGE = {"Host": "127.0.0.1:5000", "Origin": "https://attacker.example"}


def run_event() -> bytes:
    return json.dumps({"eventType": "START", "eventTime": "2026-03-01T00:00:00Z", "producer": "https://x",
                       "schemaURL": "https://x", "run": {"runId": str(uuid.uuid4())},
                       "job": {"namespace": "ns", "name": "job"}}).encode()


@pytest.fixture
async def http():
    log = SqliteEventLog(":memory:", clock=SimulatedClock(T0))
    service = LineageService(log, SimulatedClock(T0))
    async with TestClient(TestServer(http_api.application(service, bound_host="127.0.0.1"))) as client:
        yield client, log
    log.close()


@pytest.mark.parametrize("content_type", [
    "text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x", None, "application/json-seq", "text/plain; application/json",
])
async def test_a_body_a_web_page_may_send_cross_site_is_refused_with_415(http, content_type):
    client, log = http
    headers = {**PAGE, "Content-Type": content_type} if content_type is not None else PAGE
    answer = await client.post("/api/v1/lineage", data=run_event(), headers=headers,
                               skip_auto_headers=() if content_type is not None else ("Content-Type",))
    assert answer.status == 415
    error = (await answer.json())["error"]
    assert error.startswith("Content-Type: application/json is required, got ") and "\n" not in error
    assert (repr(content_type) if content_type is not None else "none") in error
    assert log.head_position() == 0


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8",
                                          "Application/JSON;charset=UTF-8"])
async def test_application_json_with_or_without_parameters_is_recorded(http, content_type):
    client, log = http
    answer = await client.post("/api/v1/lineage", data=run_event(), headers={"Content-Type": content_type})
    assert answer.status == 201, await answer.text()
    assert log.head_position() == 1
