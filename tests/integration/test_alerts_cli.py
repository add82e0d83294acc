"""`sluice alerts ...` through a real `sluice standalone` (the alerts service among the others): set with a
complete-by SLA and with a within SLA, get (webhook paths hidden), list, misses, delete, and hostile input
refused in one line: exit 1 naming the field (the server's INVALID_ARGUMENT) or exit 2 (usage)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from sluice_services.localserver import LocalServer

pytestmark = pytest.mark.integration

NS = "alertstour"
HOOK = "https://hooks.example.com/services/T0/B0/very-secret"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with LocalServer(tmp_path_factory.mktemp("alerts-cli") / "sluice") as running:
        yield running


def sluice(server, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sluice_services.cli", *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "SLUICE_SERVER": server.address})


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, (result.stdout, result.stderr)
    return result.stdout


def one_line_error(result: subprocess.CompletedProcess, code: int, text: str) -> None:
    assert result.returncode == code, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sluice: error:") and text in lines[0], result.stderr


def test_alerts_set_get_list_misses_delete_and_hostile_input(server):
    created = json.loads(ok(sluice(server, "schedules", "create", "--json", "--name", "daily", "--namespace", NS,
                                   "--app", "jobs", "--program", "daily", "--trigger", "time", "--cron", "0 2 * * *",
                                   "--zone", "UTC")))
    schedule_id = created["id"]

    said = ok(sluice(server, "alerts", "set", schedule_id[:8], "--sla-by", "06:00", "--zone", "Europe/Berlin",
                     "--webhook", HOOK, "--webhook", "http://127.0.0.1:9/hook", "--on", "failure,sla"))
    assert "by 06:00 Europe/Berlin" in said and "2 webhook(s)" in said
    policy = json.loads(ok(sluice(server, "alerts", "get", schedule_id[:8], "--json")))
    assert policy["webhooks"] == ["https://hooks.example.com/…", "http://127.0.0.1:9/…"]
    assert "very-secret" not in json.dumps(policy) and policy["nextDeadline"]
    assert policy["sla"]["completeBy"] == {"timeOfDay": "06:00", "zone": "Europe/Berlin"}

    ok(sluice(server, "alerts", "set", schedule_id, "--sla-within", "2h", "--webhook", HOOK, "--on", "sla"))
    listed = ok(sluice(server, "alerts", "list"))
    assert schedule_id[:8] in listed and "within 120m" in listed and "sla_miss" in listed
    assert "SCHEDULE" in ok(sluice(server, "alerts", "misses", "--schedule", schedule_id[:8]))

    one_line_error(sluice(server, "alerts", "set", schedule_id, "--webhook", "file:///etc/passwd"),
                   1, "INVALID_ARGUMENT: policy.webhooks[0]")
    one_line_error(sluice(server, "alerts", "set", schedule_id, "--webhook", "https://me:pw@example.com/x"),
                   1, "policy.webhooks[0]: must not carry credentials")
    one_line_error(sluice(server, "alerts", "set", schedule_id, "--webhook", HOOK, "--sla-by", "06:00",
                          "--zone", "Europe/Atlantis"), 1, "policy.sla.complete_by.zone")
    one_line_error(sluice(server, "alerts", "set", schedule_id, "--webhook", HOOK, "--sla-by", "06:00"),
                   2, "--zone: required with --sla-by")
    one_line_error(sluice(server, "alerts", "set", schedule_id, "--webhook", HOOK, "--sla-within", "soon"),
                   2, "--sla-within")
    one_line_error(sluice(server, "alerts", "set", schedule_id, "--webhook", HOOK, "--on", "always"), 2, "--on")

    assert "deleted" in ok(sluice(server, "alerts", "delete", schedule_id[:8]))
    one_line_error(sluice(server, "alerts", "get", schedule_id), 1, "NOT_FOUND")
