"""The HTTP servers bound to loopback (console, lineage, metrics) answer only requests for a loopback name:
a page whose name an attacker's DNS turns into 127.0.0.1 (DNS rebinding) sends that name as Host and
is refused with 421, before it can read a page or post an action; bound beyond loopback, any Host."""
from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone

import pytest
from aiohttp.test_utils import TestClient, TestServer

from sluice.clock import SimulatedClock
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.runtime.metrics import Registry
from sluice.runtime.metrics_http import metrics_app
from sluice_services.lineage import http_api
from sluice_services.lineage.service import LineageService
from sluice_services.web.api import Identity
from sluice_services.web.app import build_app

T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)
REBOUND = ["attacker.example:8080", "attacker.example", "127.0.0.1.attacker.example", "[::1]@attacker.example"]
LOOPBACK = ["127.0.0.1:8080", "localhost:8080", "localhost", "[::1]:8080", "127.0.0.2", "console.localhost:8080"]
JSON = {"Content-Type": "application/json"}


class ActionsApi:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def whoami(self, token):
        return Identity("anonymous", False)

    def call(self, token, service, method, request):
        self.calls.append(method)


def run_event() -> bytes:
    return json.dumps({"eventType": "START", "eventTime": "2026-03-01T00:00:00Z", "producer": "https://x",
                       "schemaURL": "https://x", "run": {"runId": str(uuid.uuid4())},
                       "job": {"namespace": "ns", "name": "job"}}).encode()


@pytest.fixture
def lineage():
    log = SqliteEventLog(":memory:", clock=SimulatedClock(T0))
    yield LineageService(log, SimulatedClock(T0))
    log.close()


@pytest.mark.parametrize("host", REBOUND)
async def test_a_rebound_name_is_refused_on_every_loopback_server(host, lineage):
    api = ActionsApi()
    async with TestClient(TestServer(build_app(api, bound_host="127.0.0.1"))) as console:
        for path in ("/login", "/confirm/replay/0/1"):
            answer = await console.get(path, headers={"Host": host})
            assert answer.status == 421 and "not a loopback name" in await answer.text()
        posted = await console.post("/actions/replay/0/1", data={"csrf": "x"}, headers={"Host": host})
        assert posted.status == 421 and api.calls == []
    async with TestClient(TestServer(http_api.application(lineage, bound_host="localhost"))) as http:
        posted = await http.post("/api/v1/lineage", data=run_event(), headers={"Host": host, **JSON})
        assert posted.status == 421 and not lineage.state.runs
    async with TestClient(TestServer(metrics_app(Registry(), bound_host="::1"))) as metrics:
        assert (await metrics.get("/metrics", headers={"Host": host})).status == 421


@pytest.mark.parametrize("host", LOOPBACK)
async def test_a_loopback_name_is_answered(host, lineage):
    async with TestClient(TestServer(build_app(ActionsApi(), bound_host="127.0.0.1"))) as console:
        assert (await console.get("/login", headers={"Host": host})).status == 200
    async with TestClient(TestServer(http_api.application(lineage, bound_host="127.0.0.1"))) as http:
        assert (await http.post("/api/v1/lineage", data=run_event(), headers={"Host": host, **JSON})).status == 201
    async with TestClient(TestServer(metrics_app(Registry(), bound_host="127.0.0.1"))) as metrics:
        assert (await metrics.get("/metrics", headers={"Host": host})).status == 200


async def test_bound_beyond_loopback_any_name_is_answered(lineage):
    async with TestClient(TestServer(build_app(ActionsApi(), bound_host="0.0.0.0"))) as console:
        assert (await console.get("/login", headers={"Host": "sluice.example.com"})).status == 200
    async with TestClient(TestServer(metrics_app(Registry(), bound_host=""))) as metrics:
        assert (await metrics.get("/metrics", headers={"Host": "sluice.example.com"})).status == 200
