"""`sluice alerts ...` through a real `sluice standalone` (the alerts service among the others): set with a
complete-by SLA and with a within SLA, get (webhook paths hidden), list, misses, delete, and hostile input
refused in one line: exit 1 naming the field (the server's INVALID_ARGUMENT) or exit 2 (usage). And end to
end: a program that fails makes exactly one call to a real HTTP receiver."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sluice_services.localserver import LocalServer
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
FAKE_SPARK_SUBMIT = REPO / "tests" / "support" / "fake_spark_submit.py"
NS = "alertstour"
HOOK = "https://hooks.example.com/services/T0/B0/very-secret"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("alerts-cli")
    (root / "apps" / "jobs").mkdir(parents=True)
    (root / "apps" / "jobs" / "boom.py").write_text("raise ValueError('bad input')\n")
    with LocalServer(root / "sluice", args=["--apps-dir", str(root / "apps"), "--spark-submit", str(FAKE_SPARK_SUBMIT),
                                            "--spark-master", "local[1]"]) as running:
        yield running


@pytest.fixture
def receiver():
    """A real HTTP receiver on a free loopback port, in a thread: the bodies it got."""
    bodies: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    yield bodies, f"http://127.0.0.1:{http.server_address[1]}/hook/token"
    http.shutdown()
    http.server_close()
    thread.join()


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


def test_a_run_that_fails_calls_the_webhook_once(server, receiver):
    bodies, url = receiver
    created = json.loads(ok(sluice(server, "schedules", "create", "--json", "--name", "boom", "--namespace", NS,
                                   "--app", "jobs", "--program", "boom", "--dataset", f"{NS}.feed", "--enabled")))
    ok(sluice(server, "alerts", "set", created["id"], "--webhook", url, "--on", "failure"))
    ok(sluice(server, "notify", "partition", "--namespace", NS, "--dataset", "feed", "--key", "hour=01",
              "--location", "/data/feed/1"))
    (body,) = eventually(lambda: list(bodies), what="the webhook call")
    assert body["sluice"]["event"] == "run_failed" and body["sluice"]["schedule_id"] == created["id"]
    assert body["sluice"]["status"] == "FAILED" and "boom" in body["text"]
    runs = json.loads(ok(sluice(server, "runs", "list", "--schedule", created["id"], "--json")))
    assert [r["status"] for r in runs] == ["FAILED"] and body["sluice"]["run_id"] == runs[0]["id"]
    time.sleep(2)  # the delivery loop's wake-ups: nothing is sent twice
    assert len(bodies) == 1
