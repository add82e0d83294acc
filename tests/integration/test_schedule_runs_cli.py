"""`sluice schedules run`, `sluice schedules backfill` and `sluice backfills` on a real `sluice standalone`:
a manual job waits for the schedule's delay unless --ignore-constraints, a time backfill makes one job per
fire time and is cancelled, and every mistake is one line on stderr with its exit code."""
from __future__ import annotations

import json

import pytest

from sluice_services.localserver import LocalServer
from tests.integration.test_cli_commands import FAKE_SPARK_SUBMIT, error, ok, sluice
from tests.integration.test_cli_job_queue import PROGRAM
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

NS = "clirun"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli-run-now")
    apps = root / "apps"
    (apps / "jobs").mkdir(parents=True)
    (apps / "jobs" / "quick.py").write_text(PROGRAM)
    (apps / "jobs" / "slow.py").write_text("import time\ntime.sleep(120)\n")
    with LocalServer(root / "sluice", args=["--apps-dir", str(apps), "--spark-submit", str(FAKE_SPARK_SUBMIT),
                                            "--spark-master", "local[1]"]) as running:
        running.transactions = root / "transactions"
        yield running


def create(server, name: str, *extra: str, program: str = "quick") -> dict:
    return json.loads(ok(sluice(server, "schedules", "create", "--json", "--name", name, "--namespace", NS, "--app",
                                "jobs", "--program", program, "--trigger", "time", "--cron", "0 2 * * *", *extra)))


def jobs_of(server, schedule: dict) -> dict[str, dict]:
    return {job["id"]: job for job in json.loads(ok(sluice(server, "jobs", "list", "--schedule", schedule["id"][:8],
                                                           "--json")))}


def test_run_now_waits_for_the_delay_and_ignore_constraints_does_not(server):
    schedule = create(server, "nightly", "--delay", "3600", "--max-concurrent", "1", "--enabled")
    waiting = ok(sluice(server, "schedules", "run", schedule["id"][:8], "--property", "day=mon")).split()[1]
    forced = json.loads(ok(sluice(server, "schedules", "run", schedule["id"][:8], "--ignore-constraints",
                                  "--logical-time", "2026-11-01T00:00:00Z", "--json")))["jobId"]
    jobs = eventually(lambda: (found := jobs_of(server, schedule)) and found.get(forced, {}).get("state") == "LAUNCHED"
                    and found)
    assert jobs[waiting]["state"] == "PENDING_CONSTRAINT" and "delay" in jobs[waiting]["reason"]
    assert jobs[waiting]["context"]["properties"] == {"day": "mon"}
    assert jobs[forced]["context"]["logicalTime"] == "2026-11-01T00:00:00Z"


def test_a_time_backfill_is_listed_and_cancelled(server):
    schedule = create(server, "held", "--delay", "3600", "--enabled")
    started = ok(sluice(server, "schedules", "backfill", schedule["id"][:8], "--from", "2026-11-01T00:00:00Z",
                        "--to", "2026-11-04T00:00:00Z"))
    assert ": 3 jobs: 0 done (0 failed), 0 running, 3 waiting, 0 discarded" in started
    backfill_id = started.split()[1]
    assert backfill_id in ok(sluice(server, "backfills", "list", "--schedule", schedule["id"][:8]))
    cancelled = ok(sluice(server, "backfills", "cancel", backfill_id))
    assert "(cancelled): 3 jobs: 0 done (0 failed), 0 running, 0 waiting, 3 discarded" in cancelled
    backfilled = [job for job in jobs_of(server, schedule).values() if job["state"] != "PENDING_TRIGGER"]
    assert {job["state"] for job in backfilled} == {"DISCARDED"}  # the cron's own next job waits for its trigger
    times = sorted(job["context"]["logicalTime"] for job in backfilled)
    assert times == ["2026-11-01T02:00:00Z", "2026-11-02T02:00:00Z", "2026-11-03T02:00:00Z"]


def test_mistakes_are_one_line_with_an_exit_code(server):
    schedule = create(server, "off")
    error(sluice(server, "schedules", "run", schedule["id"][:8]), 1, "FAILED_PRECONDITION: schedule")
    enabled = create(server, "on", "--enabled")
    short = enabled["id"][:8]
    error(sluice(server, "schedules", "backfill", short), 2, "--from and --to")
    error(sluice(server, "schedules", "backfill", short, "--keys", "date"), 2, "--keys")
    error(sluice(server, "schedules", "backfill", short, "--from", "2026-11-01", "--to", "2026-11-02Z"), 2, "--from")
    error(sluice(server, "schedules", "backfill", short, "--from", "2026-11-04T00:00Z", "--to", "2026-11-01T00:00Z"),
          1, "INVALID_ARGUMENT: --to")
    error(sluice(server, "schedules", "backfill", short, "--from", "2000-01-01T00:00Z", "--to", "2030-01-01T00:00Z"),
          1, "INVALID_ARGUMENT: --to: the range holds more than 10000")
    error(sluice(server, "schedules", "run", short, "--property", "novalue"), 2, "--property")
    error(sluice(server, "backfills", "get", "nope"), 1, "NOT_FOUND: backfill nope")


def test_a_request_id_given_again_repeats_the_answer_and_with_another_body_is_refused(server):
    schedule_id = create(server, "retried", "--delay", "3600", "--enabled")["id"]
    short = schedule_id[:8]
    november = ("schedules", "backfill", short, "--request-id", "nov", "--to", "2026-11-08T00:00Z")
    started = ok(sluice(server, *november, "--from", "2026-11-01T00:00Z"))
    assert ok(sluice(server, *november, "--from", "2026-11-01T01:00+01:00")) == started  # the same instant
    error(sluice(server, *november, "--from", "2026-11-05T00:00Z"), 1,
          f"ALREADY_EXISTS: request_id 'nov' was given earlier to a different backfill of schedule "
          f"{schedule_id} (backfill {started.split()[1]})")
    assert len(json.loads(ok(sluice(server, "backfills", "list", "--schedule", short, "--json")))) == 1
    run = ("schedules", "run", short, "--request-id", "now", "--property")
    job = ok(sluice(server, *run, "day=mon"))
    assert ok(sluice(server, *run, "day=mon")) == job
    error(sluice(server, *run, "day=tue"), 1, f"ALREADY_EXISTS: request_id 'now' was given earlier to a different "
                                               f"run-now request of schedule {schedule_id} (job {job.split()[1]})")


def test_cancel_running_kills_the_backfills_runs_going(server):
    schedule = create(server, "slow", "--max-concurrent", "1", "--enabled", program="slow")
    started = ok(sluice(server, "schedules", "backfill", schedule["id"][:8], "--from", "2026-11-01T00:00:00Z",
                        "--to", "2026-11-04T00:00:00Z"))
    backfill_id = started.split()[1]
    running = eventually(lambda: (found := json.loads(ok(sluice(server, "backfills", "get", backfill_id, "--json"))))
                       .get("runningRuns") and found)
    (run_id,) = running["runningRuns"]
    eventually(lambda: json.loads(ok(sluice(server, "runs", "get", run_id[:8], "--json"))).get("status") == "RUNNING")
    ok(sluice(server, "backfills", "cancel", backfill_id, "--running"))
    eventually(lambda: json.loads(ok(sluice(server, "runs", "get", run_id[:8], "--json"))).get("status") == "KILLED")
    ended = eventually(lambda: "1 done (1 failed), 0 running, 0 waiting, 2 discarded" in (
        text := ok(sluice(server, "backfills", "get", backfill_id))) and text)
    assert "(cancelled)" in ended
