"""`sluice runs logs -f` and `sluice runs cancel` as a user runs them, real CLI subprocesses against a
real `sluice standalone` (spark-submit is the stand-in tests/support/fake_spark_submit.py: each program
is a real process under the supervise wrapper): the log's lines come out as the program writes them;
a cancelled program is killed within 5 s, its run ends KILLED, and a schedule triggered on KILLED of
that program fires; a schedule's --max-run-time reaches its runs, and a program sleeping past it is
killed and says so; `runs logs --tail N` starts at the Nth line from the end and follows from there;
the log API refuses hostile ids, attempts, offsets and tails naming the field."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import grpc
import pytest

from sluice.cli.output import jsonable
from sluice.client import SluiceClient
from sluice.v1 import runs_pb2
from sluice_services.localserver import LocalServer
from tests.integration.test_cli_commands import FAKE_SPARK_SUBMIT, error, ok
from tests.support.waiting import eventually

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NS = "runctl"
TALKER = """
import time
from pathlib import Path
print("first line", flush=True)
while not Path({go!r}).exists():
    time.sleep(0.05)
print("second line", flush=True)
"""
SLEEPER = """
import time
print("sleeping", flush=True)
time.sleep(120)
"""
AFTER_KILL = "print('the upstream was killed')\n"
CHATTY = """
import time
from pathlib import Path
for n in range(1, 3001):
    print(f"line {{n}} · zählt", flush=n == 3000)
while not Path({go!r}).exists():
    time.sleep(0.05)
print("after the go", flush=True)
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("run-control")
    apps = root / "apps" / "etl"
    apps.mkdir(parents=True)
    go = root / "go"
    (apps / "talker.py").write_text(TALKER.format(go=str(go)))
    (apps / "sleeper.py").write_text(SLEEPER)
    (apps / "after_kill.py").write_text(AFTER_KILL)
    (apps / "overrun.py").write_text(SLEEPER)
    (apps / "quick.py").write_text(AFTER_KILL)
    (apps / "chatty.py").write_text(CHATTY.format(go=str(root / "go-chatty")))
    with LocalServer(root / "sluice", args=["--apps-dir", str(root / "apps"), "--spark-submit", str(FAKE_SPARK_SUBMIT),
                                            "--spark-master", "local[1]"]) as running:
        running.go, running.go_chatty = go, root / "go-chatty"
        yield running


def sluice(server, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(_command(*args), capture_output=True, text=True, timeout=60, env=_env(server))


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "sluice_services.cli", *args]


def _env(server) -> dict:
    return {**os.environ, "SLUICE_SERVER": server.address}


def launched(server, program: str, *options: str, status: str = "RUNNING") -> dict:
    """A run of `program` once `status`, started through a partition schedule (created with `options`) and a
    notification."""
    ok(sluice(server, "schedules", "create", "--name", program, "--namespace", NS, "--app", "etl",
              "--program", program, "--dataset", f"{NS}.{program}_in", "--enabled", *options))
    ok(sluice(server, "notify", "partition", "--namespace", NS, "--dataset", f"{program}_in", "--key", "hour=01",
              "--location", f"/data/{program}/1"))
    return eventually(lambda: _run_of(server, program, status))


@pytest.fixture(scope="module")
def some_run(server) -> str:
    """The id of a run that ended."""
    return launched(server, "quick", status="FAILED")["id"]  # it wrote no result.json: its outputs failed


def _run_of(server, program: str, status: str = "") -> dict | None:
    with SluiceClient(server.address) as client:
        runs = [jsonable(run) for run in client.list_runs()]
    return next((r for r in runs if r["program"]["program"] == program and (not status or r["status"] == status)), None)


def test_runs_logs_follow_prints_the_lines_as_the_program_writes_them(server):
    run = launched(server, "talker")
    follow = subprocess.Popen(_command("runs", "logs", run["id"][:8], "-f"), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=_env(server))
    try:
        assert follow.stdout.readline() == "first line\n"  # while the program waits for the go file
        assert follow.poll() is None
        server.go.write_text("go")
        assert follow.stdout.readline() == "second line\n"
        assert follow.wait(timeout=30) == 0  # -f ends with the attempt
    finally:
        follow.kill()
        follow.wait()
    whole = ok(sluice(server, "runs", "logs", run["id"][:8], "--attempt", "1"))
    assert whole.startswith("first line\nsecond line\n")


def test_runs_logs_tail_starts_at_the_last_lines_then_follows(server):
    run = launched(server, "chatty")
    with SluiceClient(server.address) as client:
        request = runs_pb2.StreamRunLogRequest(id=run["id"], tail_lines=2)
        eventually(lambda: b"line 3000" in b"".join(c.data for c in client.runs.StreamRunLog(request, timeout=10)))
        chunks = list(client.runs.StreamRunLog(request, timeout=10))
        whole = b"".join(c.data for c in client.runs.StreamRunLog(runs_pb2.StreamRunLogRequest(id=run["id"]), timeout=10))
    assert b"".join(c.data for c in chunks).decode() == "line 2999 · zählt\nline 3000 · zählt\n"
    assert chunks[0].offset == len(whole) - len(chunks[0].data) > 50_000, "the tail's offset is in the whole log"
    follow = subprocess.Popen(_command("runs", "logs", run["id"][:8], "-f", "--tail", "1"), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=_env(server))
    try:
        assert follow.stdout.readline() == "line 3000 · zählt\n"
        server.go_chatty.write_text("go")
        assert follow.stdout.readline() == "after the go\n"
        assert follow.wait(timeout=30) == 0
    finally:
        follow.kill()
        follow.wait()
    assert ok(sluice(server, "runs", "logs", run["id"][:8], "--tail", "3")) == \
        "line 2999 · zählt\nline 3000 · zählt\nafter the go\n"
    assert ok(sluice(server, "runs", "logs", run["id"][:8])).startswith("line 1 · zählt\n"), "no --tail: the whole log"
    error(sluice(server, "runs", "logs", run["id"][:8], "--tail", "0"), 2, "--tail: must be 1 or more")
    error(sluice(server, "runs", "logs", run["id"][:8], "--tail", str(2**40)), 2, "--tail: far too many lines")
    error(sluice(server, "runs", "logs", run["id"][:8], "--tail", "100001"), 1, "INVALID_ARGUMENT: tail_lines:")


def test_cancel_kills_the_program_within_5_s_and_a_schedule_on_killed_fires(server):
    ok(sluice(server, "schedules", "create", "--name", "after_kill", "--namespace", NS, "--app", "etl",
              "--program", "after_kill", "--trigger", "program-status", "--upstream", f"{NS}.etl.sleeper",
              "--status", "KILLED", "--enabled"))
    run = launched(server, "sleeper")
    began = time.monotonic()
    said = ok(sluice(server, "runs", "cancel", run["id"][:8], "--reason", "wrong input"))
    took = time.monotonic() - began
    assert said.startswith(f"run {run['id'][:8]} KILLED: killed by ") and said.strip().endswith(": wrong input"), said
    assert took < 5, took
    detail = _run_of(server, "sleeper")
    assert detail["status"] == "KILLED" and detail["attempts"][0]["status"] == "KILLED"
    wrapper = detail["attempts"][0]["pid"]
    assert not Path(f"/proc/{wrapper}").exists() or "Z" in Path(f"/proc/{wrapper}/stat").read_text().split(")")[1][:3]
    downstream = eventually(lambda: _run_of(server, "after_kill"))
    assert downstream["status"] in ("STARTING", "RUNNING", "COMPLETED", "FAILED")
    again = sluice(server, "runs", "cancel", run["id"][:8])
    error(again, 1, "FAILED_PRECONDITION: run ")
    assert "it is KILLED" in again.stderr
    error(sluice(server, "runs", "cancel", "0" * 36), 1, "NOT_FOUND")


def test_a_program_sleeping_past_its_schedules_time_limit_is_killed_and_marked_so(server):
    ended = launched(server, "overrun", "--max-run-time", "2s", status="KILLED")
    assert ended["error"] == "killed by launcher (time limit): time limit 2s exceeded"
    started, killed = (datetime.fromisoformat(ended[key].replace("Z", "+00:00")) for key in ("startedAt", "endedAt"))
    assert ended["attempts"][0]["status"] == "KILLED" and 2 <= (killed - started).total_seconds() < 10


@pytest.mark.parametrize("request_, code, field", [
    (runs_pb2.StreamRunLogRequest(id="../../etc"), grpc.StatusCode.INVALID_ARGUMENT, "id"),
    (runs_pb2.StreamRunLogRequest(id=""), grpc.StatusCode.INVALID_ARGUMENT, "id"),
    (runs_pb2.StreamRunLogRequest(id="no-such-run"), grpc.StatusCode.NOT_FOUND, ""),
    (runs_pb2.StreamRunLogRequest(id="RUN", attempt=-1), grpc.StatusCode.INVALID_ARGUMENT, "attempt"),
    (runs_pb2.StreamRunLogRequest(id="RUN", attempt=99), grpc.StatusCode.INVALID_ARGUMENT, "attempt"),
    (runs_pb2.StreamRunLogRequest(id="RUN", from_offset=-1), grpc.StatusCode.INVALID_ARGUMENT, "from_offset"),
    (runs_pb2.StreamRunLogRequest(id="RUN", tail_lines=-1), grpc.StatusCode.INVALID_ARGUMENT, "tail_lines"),
    (runs_pb2.StreamRunLogRequest(id="RUN", tail_lines=100_001), grpc.StatusCode.INVALID_ARGUMENT, "tail_lines"),
    (runs_pb2.StreamRunLogRequest(id="RUN", tail_lines=2**31 - 1), grpc.StatusCode.INVALID_ARGUMENT, "tail_lines"),
    (runs_pb2.StreamRunLogRequest(id="RUN", tail_lines=5, from_offset=3), grpc.StatusCode.INVALID_ARGUMENT,
     "tail_lines"),
])
def test_hostile_log_requests_are_refused_naming_the_field(server, some_run, request_, code, field):
    with SluiceClient(server.address) as client:
        if request_.id == "RUN":
            request_.id = some_run
        with pytest.raises(grpc.RpcError) as raised:
            list(client.runs.StreamRunLog(request_, timeout=10))
    assert raised.value.code() == code and raised.value.details().startswith(field), raised.value.details()
    if field == "attempt" and request_.attempt > 0:
        error(sluice(server, "runs", "logs", request_.id, "--attempt", "99"), 1, "INVALID_ARGUMENT: attempt:")


@pytest.mark.parametrize("reason, message", [("x" * 1001, "reason: at most 1000 characters"),
                                             ("red\x1b[31m", "reason: must not hold control characters")])
def test_a_hostile_cancel_reason_is_refused_naming_the_field(server, some_run, reason, message):
    with SluiceClient(server.address) as client:
        with pytest.raises(grpc.RpcError) as raised:
            client.runs.CancelRun(runs_pb2.CancelRunRequest(id=some_run, reason=reason), timeout=10)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT and raised.value.details().startswith(message)
