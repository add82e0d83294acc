"""The `sluice` CLI against a running standalone: readable tables, --json, and one-line errors with exit codes."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

import pytest

from sluice_services.localserver import LocalServer
from tests.conftest import free_port

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with LocalServer(tmp_path_factory.mktemp("cli") / "sluice") as running:
        yield running


def sluice(server, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sluice_services.cli", "--server", server.address, *args],
                          capture_output=True, text=True, timeout=60)


def assert_one_line_error(result: subprocess.CompletedProcess, code: int, text: str) -> None:
    assert result.returncode == code, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sluice: error:") and text in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def create_args(name: str, *extra: str) -> list[str]:
    return ["schedules", "create", "--name", name, "--namespace", "experiments", "--app", "clickstream",
            "--program", "hourly_metrics", "--dataset", "experiments.cli_only", *extra]


def test_schedule_commands(server):
    created = sluice(server, "--json", *create_args("cli_schedule", "--count", "2", "--property", "experiment=exp-1"))
    assert created.returncode == 0, created.stderr
    schedule = json.loads(created.stdout)
    assert schedule["trigger"]["partition"] == {"namespace": "experiments", "dataset": "cli_only", "count": 2}
    assert schedule["properties"] == {"experiment": "exp-1"} and not schedule.get("enabled")

    listed = sluice(server, "schedules", "list")
    assert listed.returncode == 0
    header, rule, *rows = listed.stdout.splitlines()
    assert header.split()[:3] == ["ID", "NAME", "PROGRAM"]
    assert any("cli_schedule" in row and "partition experiments.cli_only x2" in row for row in rows)

    assert json.loads(sluice(server, "--json", "schedules", "enable", schedule["id"]).stdout)["enabled"] is True
    assert sluice(server, "schedules", "delete", schedule["id"]).stdout.strip() == f"deleted {schedule['id']}"
    assert_one_line_error(sluice(server, "schedules", "get", schedule["id"]), 1, "NOT_FOUND")


@pytest.mark.parametrize("extra, code, text", [
    (["--count", "0"], 1, "INVALID_ARGUMENT: schedule.trigger.partition.count: must be at least 1"),
    (["--trigger", "cron"], 2, "--trigger: unknown trigger type 'cron'"),
    (["--property", "novalue"], 2, "--property: expected KEY=VALUE"),
    (["--trigger", "time", "--cron", "0 25 * * *"], 1, "INVALID_ARGUMENT: schedule.trigger.time.cron"),
    (["--trigger", "time", "--cron", "0 2 * * *", "--zone", "Mars/Base"], 1, "schedule.trigger.time.zone"),
    (["--trigger", "program-status", "--upstream", "a.b"], 2, "--upstream: expected NAMESPACE.APP.PROGRAM"),
])
def test_schedule_create_bad_input(server, extra, code, text):
    assert_one_line_error(sluice(server, *create_args("bad", *extra)), code, text)


def test_time_and_composite_schedules(server, tmp_path):
    timed = sluice(server, "--json", *create_args("nightly", "--trigger", "time", "--cron", "0 2 * * *",
                                                  "--zone", "Asia/Tokyo"))
    assert timed.returncode == 0, timed.stderr
    assert json.loads(timed.stdout)["trigger"] == {"time": {"cron": "0 2 * * *", "zone": "Asia/Tokyo"}}
    spec = tmp_path / "daily.json"
    spec.write_text(json.dumps({
        "name": "daily_or_late", "program": {"namespace": "experiments", "app": "clickstream", "program": "daily"},
        "trigger": {"or": {"any_of": [
            {"partition": {"namespace": "experiments", "dataset": "hourly", "count": 24,
                           "filter": {"marketplace": {"values": ["JP"]}}}},
            {"time": {"cron": "0 2 * * *", "zone": "Asia/Tokyo"}}]}}}))
    composite = sluice(server, "schedules", "create", "--file", str(spec))
    assert composite.returncode == 0, composite.stderr
    listed = sluice(server, "schedules", "list", "--app", "clickstream").stdout
    assert "(partition experiments.hourly x24) OR (time '0 2 * * *' Asia/Tokyo)" in listed
    spec.write_text('{"name": "x", "trigger": {"sometimes": {}}}')
    assert_one_line_error(sluice(server, "schedules", "create", "--file", str(spec)), 2, "--file: not a Schedule")


def test_schedule_with_empty_dataset_names_the_field(server):
    args = create_args("bad")
    args[args.index("experiments.cli_only")] = "experiments."
    assert_one_line_error(sluice(server, *args), 1, "schedule.trigger.partition.dataset: must not be empty")


def notify_args(*extra: str) -> list[str]:
    return ["notify", "partition", "--namespace", "experiments", "--dataset", "cli_only", "--location", "/data/p", *extra]


def test_notify_partition_publishes(server):
    result = sluice(server, "--json", *notify_args("--key", "hour=09", "--id", "cli-n-1"))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"id": "cli-n-1"}


@pytest.mark.parametrize("extra, code, text", [
    (["--key", "hour"], 2, "--key: expected KEY=VALUE"),
    ([], 1, "INVALID_ARGUMENT: notification.partition_committed.partitions[0].key: must have at least one key value"),
    (["--key", "hour=1", "--size-bytes", "-5"], 1, "partitions[0].size_bytes: must be between 0 and"),
])
def test_notify_partition_bad_input(server, extra, code, text):
    assert_one_line_error(sluice(server, *notify_args(*extra)), code, text)


def test_jobs_runs_and_lineage_listings(server):
    for args in (["jobs", "list"], ["runs", "list"]):
        result = sluice(server, *args)
        assert result.returncode == 0 and result.stdout.splitlines()[0].split()[0] in ("JOB", "RUN")
    assert json.loads(sluice(server, "--json", "runs", "list").stdout) == []
    assert sluice(server, "lineage", "show").stdout.strip() == "no lineage recorded"


def test_unreachable_server_is_one_line_exit_3():
    result = subprocess.run([sys.executable, "-m", "sluice_services.cli", "--server", f"127.0.0.1:{free_port()}",
                             "schedules", "list"], capture_output=True, text=True, timeout=60)
    assert_one_line_error(result, 3, "cannot reach Sluice at")


def test_apps_deploy_with_and_without_update_schedules(server, tmp_path):
    def app_file(schedules: list[tuple[str, int]]) -> str:
        path = tmp_path / "app.json"
        path.write_text(json.dumps({
            "namespace": "shop", "app": "orders", "programs": [{"name": "ingest"}, {"name": "report"}],
            "schedules": [{"name": name, "program": {"namespace": "shop", "app": "orders", "program": "report"},
                           "trigger": {"partition": {"namespace": "shop", "dataset": "orders", "count": count}}}
                          for name, count in schedules]}))
        return str(path)

    first = sluice(server, "apps", "deploy", app_file([("a", 1), ("b", 1)]))
    assert first.stdout.strip() == "deployed shop.orders: created 2, updated 0, deleted 0 schedule(s)", first.stderr
    frozen = sluice(server, "--json", "apps", "deploy", "--no-update-schedules", app_file([("a", 3)]))
    assert json.loads(frozen.stdout) == {}
    refused = sluice(server, "apps", "deploy", app_file([("a", 3), ("c", 1)]))
    assert_one_line_error(refused, 1, "FAILED_PRECONDITION: deploying shop.orders would delete 1 schedule(s) it "
                                      "does not name: b (prune to delete them)")
    changed = sluice(server, "--json", "apps", "deploy", "--prune", app_file([("a", 3), ("c", 1)]))
    assert json.loads(changed.stdout) == {"created": ["c"], "updated": ["a"], "deleted": ["b"]}


@pytest.mark.parametrize("schedule, text", [
    ({"name": "x", "program": {"namespace": "shop", "app": "orders", "program": "missing"},
      "trigger": {"partition": {"namespace": "shop", "dataset": "d", "count": 1}}},
     "INVALID_ARGUMENT: app.schedules[0].program.program: 'missing' is not a program of the app"),
    ({"name": "x", "program": {"namespace": "shop", "app": "orders", "program": "report"},
      "trigger": {"programStatus": {"namespace": "shop", "app": "billing", "program": "invoice",
                                    "statuses": ["COMPLETED"], "count": 0}}},
     "INVALID_ARGUMENT: app.schedules[0].trigger.program_status.count: must be at least 1"),
])
def test_apps_deploy_bad_input_names_the_field(server, tmp_path, schedule, text):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"namespace": "shop", "app": "orders", "programs": [{"name": "report"}],
                                "schedules": [schedule]}))
    assert_one_line_error(sluice(server, "apps", "deploy", str(path)), 1, text)


def test_jobs_pending_and_history_with_causes(server):
    created = json.loads(sluice(server, "--json", *create_args("history_demo", "--count", "2", "--enabled")).stdout)
    assert sluice(server, *notify_args("--key", "hour=01")).returncode == 0

    def pending() -> list[dict]:
        return json.loads(sluice(server, "--json", "jobs", "list", "--pending", "--schedule", created["id"]).stdout)

    deadline = time.monotonic() + 30
    while not pending() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [job["state"] for job in pending()] == ["PENDING_TRIGGER"]

    sluice(server, "schedules", "disable", created["id"])
    while pending() and time.monotonic() < deadline:
        time.sleep(0.2)
    history = sluice(server, "jobs", "history", "--schedule", created["id"]).stdout.splitlines()
    assert history[0].split() == ["JOB", "AT", "STATE", "CAUSE"]
    assert [" ".join(line.split()[3:]) for line in history[2:]] == [
        "PENDING_TRIGGER first matching notification", "DISCARDED schedule disabled"]


def test_constraints_from_options_and_the_job_shows_what_it_waits_on(server):
    opens = datetime.now(timezone.utc) + timedelta(hours=2)  # a one-minute window two hours from now
    window = f"{opens:%H:%M}-{opens + timedelta(minutes=1):%H:%M}"
    created = sluice(server, "--json", *create_args("windowed", "--dataset", "experiments.cli_window", "--enabled",
                                                    "--window", window, "--window-zone", "Pacific/Kiritimati",
                                                    "--max-concurrent", "1", "--group", "nightly", "--max-runs", "2/day",
                                                    "--timeout", "7200", "--timeout-policy", "force-launch"))
    assert created.returncode == 0, created.stderr
    schedule = json.loads(created.stdout)
    assert schedule["constraints"] == [
        {"concurrency": {"maxRunning": 1, "group": "nightly"}},
        {"timeWindow": {"start": window[:5], "end": window[6:], "zone": "Pacific/Kiritimati"}},
        {"maxRunsPerWindow": {"maxRuns": 2, "unit": "day", "zone": "Pacific/Kiritimati"}}]
    assert schedule["timeout"] == "7200s" and schedule["timeoutPolicy"] == "TIMEOUT_FORCE_LAUNCH"
    published = sluice(server, "notify", "partition", "--namespace", "experiments", "--dataset", "cli_window",
                       "--key", "hour=01", "--location", "/tmp/cli_window/1")
    assert published.returncode == 0, published.stderr

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        jobs = json.loads(sluice(server, "--json", "jobs", "list", "--pending", "--schedule", schedule["id"]).stdout)
        if jobs and jobs[0]["state"] == "PENDING_CONSTRAINT":
            break
        time.sleep(0.2)
    (job,) = jobs
    assert job["waitingOn"] == [f"outside the window {window} Pacific/Kiritimati"], job
    assert job["constraints"][1]["timeWindow"]["start"] == window[:5] and "nextCheck" in job
    table = sluice(server, "jobs", "list", "--schedule", schedule["id"]).stdout.splitlines()
    assert "NEXT CHECK" in table[0] and "WAITING ON / REASON" in table[0]
    assert any("PENDING_CONSTRAINT" in row and f"outside the window {window}" in row for row in table[2:])


@pytest.mark.parametrize("extra, code, text", [
    (["--window", "0200"], 2, "--window: expected HH:MM-HH:MM"),
    (["--window", "02:00-02:00"], 1, "schedule.constraints[0].time_window.end: must differ from start"),
    (["--delay", "-1"], 1, "schedule.constraints[0].delay.seconds: must be at least 0"),
    (["--max-runs", "x/day"], 2, "--max-runs: expected N/hour or N/day"),
    (["--max-runs", "1/week"], 1, "schedule.constraints[0].max_runs_per_window.unit"),
    (["--timeout", "-5"], 1, "schedule.timeout: must be at least 0"),
    (["--trigger", "time", "--cron", "0 * * * *", "--misfire", "fire-each", "--catch-up", "0"], 1,
     "schedule.catch_up: must be at least 1 (range 1 to 316224000 seconds)"),
])
def test_constraint_options_bad_input(server, extra, code, text):
    assert_one_line_error(sluice(server, *create_args("bad_constraint", *extra)), code, text)
