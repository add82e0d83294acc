"""Every `sluice` client command driven as a user would, through a real `sluice standalone` (one per
module): each group's help, global options anywhere, id prefixes (unique, ambiguous, unknown),
schedules update, dataset transactions, what pending jobs wait for, failed runs' errors, apps deploy
and pruning, and the errors: one line, exit 1 (refused), 2 (usage), 3 (unreachable)."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from google.protobuf import json_format

from sluice.client import SluiceClient
from sluice.v1 import notifications_pb2 as npb
from sluice.v1 import schedules_pb2 as spb
from sluice_services.cli.main import build_parser
from sluice_services.localserver import LocalServer
from tests.conftest import free_port
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
FAKE_SPARK_SUBMIT = REPO / "tests" / "support" / "fake_spark_submit.py"
NS = "clitour"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli-tour")
    apps = root / "apps"
    (apps / "jobs").mkdir(parents=True)
    (apps / "jobs" / "boom.py").write_text("def main():\n    raise ValueError('bad input')\n\n\nmain()\n")
    with LocalServer(root / "sluice", args=["--apps-dir", str(apps), "--spark-submit", str(FAKE_SPARK_SUBMIT),
                                            "--spark-master", "local[1]"]) as running:
        running.transactions = root / "transactions"
        running.apps = apps
        yield running


def sluice(server, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sluice_services.cli", *args],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "SLUICE_SERVER": server.address,
                               "SLUICE_TRANSACTIONS_DIR": str(server.transactions), **(env or {})})


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, (result.stdout, result.stderr)
    return result.stdout


def error(result: subprocess.CompletedProcess, code: int, text: str, extra_lines: int = 0) -> list[str]:
    """The error's line, checked: exit `code`, `text` in it, no traceback; then its `extra_lines` lines."""
    assert result.returncode == code, (result.stdout, result.stderr)
    first, *rest = result.stderr.strip().splitlines()
    assert first.startswith("sluice: error:") and text in first, result.stderr
    assert len(rest) == extra_lines and "Traceback" not in result.stderr, result.stderr
    return rest


def create(server, name: str, *extra: str, program: str = "hourly", dataset: str = "") -> dict:
    result = sluice(server, "schedules", "create", "--json", "--name", name, "--namespace", NS, "--app", "jobs",
                    "--program", program, "--dataset", dataset or f"{NS}.{name}", *extra)
    return json.loads(ok(result))


# -- help ------------------------------------------------------------------------------------------

def groups(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            if path:
                yield path, parser, action
            for name, sub in action.choices.items():
                yield from groups(sub, (*path, name))


def test_every_group_lists_every_subcommand_in_its_help():
    found = list(groups(build_parser()))
    assert {path for path, _, _ in found} >= {("schedules",), ("jobs",), ("runs",), ("datasets",), ("apps",)}
    for path, parser, action in found:
        text = parser.format_help()
        listed = {line.split()[0] for line in text.splitlines() if line.startswith("    ") and line.split()}
        assert set(action.choices) <= listed, (path, set(action.choices) - listed)


def test_group_help_from_the_command_line(server):
    listed = ok(sluice(server, "schedules", "--help"))
    for action in ("create", "update", "list", "get", "enable", "disable", "delete"):
        assert f"    {action} " in listed
    assert "    history " in ok(sluice(server, "jobs", "--help"))
    assert "    get " in ok(sluice(server, "runs", "--help"))
    bare = sluice(server, "jobs")
    assert bare.returncode == 2 and bare.stdout == ""
    assert bare.stderr.startswith("usage: sluice jobs ") and "    list " in bare.stderr and "standalone" not in bare.stderr


# -- global options anywhere, output -----------------------------------------------------------

def test_global_options_before_or_after_the_command(server):
    create(server, "anywhere")
    before = json.loads(ok(sluice(server, "--json", "schedules", "list", "--namespace", NS)))
    after = json.loads(ok(sluice(server, "schedules", "list", "--namespace", NS, "--json")))
    assert before == after and any(s["name"] == "anywhere" for s in after)
    elsewhere = f"127.0.0.1:{free_port()}"
    moved = sluice(server, "schedules", "list", "--server", server.address, "--json", env={"SLUICE_SERVER": elsewhere})
    assert json.loads(ok(moved)) == after
    error(sluice(server, "schedules", "list", "--server", elsewhere), 3, f"cannot reach Sluice at {elsewhere}")


def test_create_prints_one_line_and_json_numbers_are_numbers(server):
    text = ok(sluice(server, "schedules", "create", "--name", "summary", "--namespace", NS, "--app", "jobs",
                     "--program", "hourly", "--dataset", f"{NS}.summary", "--count", "2"))
    assert text.count("\n") == 1 and text.startswith("created schedule ")
    assert "summary: clitour.jobs.hourly, partition clitour.summary x2, disabled, generation 1" in text
    detail = json.loads(ok(sluice(server, "schedules", "get", text.split()[2], "--json")))
    assert detail["generation"] == 1 and detail["trigger"]["partition"]["count"] == 2


# -- id prefixes -----------------------------------------------------------------------------------

def test_id_prefixes_unique_ambiguous_and_unknown(server):
    with SluiceClient(server.address) as client:  # 17 hex ids: two share a first character
        made = [json_format.MessageToDict(client.create_schedule(spb.Schedule(
            name=f"prefix_{i}", program=npb.ProgramRef(namespace=NS, app="jobs", program="hourly"),
            trigger=spb.Trigger(partition=spb.PartitionTrigger(namespace=NS, dataset="prefixes", count=1)))))
            for i in range(17)]
    first = {}
    for schedule in made:
        first.setdefault(schedule["id"][0], []).append(schedule["id"])
    shared, ids = next((c, i) for c, i in first.items() if len(i) > 1)
    candidates = error(sluice(server, "schedules", "get", shared), 1,
                       f"INVALID_ARGUMENT: schedule id prefix '{shared}' is ambiguous", extra_lines=len(ids))
    assert sorted(line.split()[0] for line in candidates) == sorted(ids)

    schedule = made[0]
    short = schedule["id"][:8]
    assert json.loads(ok(sluice(server, "schedules", "get", short, "--json")))["id"] == schedule["id"]
    assert ok(sluice(server, "schedules", "enable", short)).startswith(f"enabled schedule {short} prefix_0:")
    assert ok(sluice(server, "schedules", "disable", short)).startswith(f"disabled schedule {short} ")
    assert ok(sluice(server, "jobs", "history", "--schedule", short)).splitlines()[0].split() == \
        ["JOB", "AT", "STATE", "CAUSE"]
    assert ok(sluice(server, "jobs", "list", "--schedule", short)).startswith("JOB")
    assert ok(sluice(server, "runs", "list", "--schedule", short)).startswith("RUN")

    for args in (["schedules", "enable", "0000zzzz"], ["schedules", "update", "0000zzzz", "--count", "2"],
                 ["jobs", "history", "--schedule", "0000zzzz"], ["runs", "list", "--schedule", "0000zzzz"],
                 ["runs", "get", "0000zzzz"]):
        error(sluice(server, *args), 1, "NOT_FOUND: no ")
    assert ok(sluice(server, "schedules", "delete", short)).strip() == f"deleted {schedule['id']}"
    error(sluice(server, "schedules", "get", short), 1, f"NOT_FOUND: no schedule with id or id prefix '{short}'")


# -- schedules update ------------------------------------------------------------------------------

def test_update_changes_what_is_given_and_keeps_the_rest(server, tmp_path):
    schedule = create(server, "updated", "--count", "2", "--property", "a=1", "--max-concurrent", "1",
                      "--priority", "3", "--enabled")
    short = schedule["id"][:8]
    line = ok(sluice(server, "schedules", "update", short, "--count", "5", "--property", "b=2", "--delay", "60"))
    assert line.startswith(f"updated schedule {short} updated: ") and "x5, enabled, generation 2" in line
    after = json.loads(ok(sluice(server, "schedules", "get", short, "--json")))
    assert after["trigger"] == {"partition": {"namespace": NS, "dataset": "updated", "count": 5}}
    assert after["properties"] == {"a": "1", "b": "2"} and after["priority"] == 3 and after["enabled"] is True
    assert after["constraints"] == [{"concurrency": {"maxRunning": 1}}, {"delay": {"seconds": 60}}]
    assert after["generation"] == 2

    timed = json.loads(ok(sluice(server, "--json", "schedules", "update", short, "--trigger", "time",
                                 "--cron", "0 2 * * *", "--zone", "Asia/Tokyo", "--disabled")))
    assert timed["trigger"] == {"time": {"cron": "0 2 * * *", "zone": "Asia/Tokyo"}} and not timed.get("enabled")
    spec = tmp_path / "schedule.json"
    spec.write_text(json.dumps({"trigger": {"elapsed": {"seconds": 600}}, "properties": {"c": "3"}}))
    whole = json.loads(ok(sluice(server, "schedules", "update", short, "--file", str(spec), "--json")))
    assert whole["name"] == "updated" and whole["trigger"] == {"elapsed": {"seconds": 600}}
    assert whole["properties"] == {"c": "3"} and whole["generation"] == 4
    error(sluice(server, "schedules", "update", short, "--count", "2"), 2,
          "--count: not an option of the elapsed trigger (the schedule's trigger is elapsed 600s;")
    error(sluice(server, "schedules", "update", short, "--trigger", "partition", "--dataset", f"{NS}.updated",
                 "--count", "0"), 1,
          "INVALID_ARGUMENT: schedule.trigger.partition.count: must be at least 1")
    error(sluice(server, "schedules", "update", short, "--enabled", "--disabled"), 2, "give one")


# -- datasets: transactions over several commands -----------------------------------------------

def test_dataset_transaction_begin_add_commit_and_abort(server):
    ok(sluice(server, "datasets", "create", f"{NS}.events", "--key", "hour:INT", "--base-location", "/data/events"))
    transaction = ok(sluice(server, "datasets", "begin", f"{NS}.events")).strip()
    assert transaction.startswith(f"{NS}.events@")
    for hour in (1, 2):
        added = ok(sluice(server, "datasets", "add", "--transaction", transaction, "--key", f"hour={hour}",
                          "--location", f"/data/events/hour={hour}", "--record-count", "10"))
        assert added.startswith(f"added to transaction {transaction} ({hour} partition(s)")
    listed = json.loads(ok(sluice(server, "--json", "datasets", "partitions", f"{NS}.events")))
    assert not listed.get("partitions")  # nothing visible before the commit
    committed = json.loads(ok(sluice(server, "datasets", "commit", transaction, "--json")))
    assert committed["status"] == "COMMITTED"
    listed = json.loads(ok(sluice(server, "--json", "datasets", "partitions", f"{NS}.events")))
    assert [p["partition"]["key"][0]["value"] for p in listed["partitions"]] == ["1", "2"]

    aborted = ok(sluice(server, "datasets", "begin", f"{NS}.events"))
    assert ok(sluice(server, "datasets", "abort", aborted.strip())).strip() == f"aborted transaction {aborted.strip()}"
    error(sluice(server, "datasets", "add", "--transaction", aborted.strip(), "--key", "hour=3", "--location", "/x"),
          1, "NOT_FOUND: no open transaction")
    error(sluice(server, "datasets", "commit", "events-7"), 2, "expected NAMESPACE.DATASET@POSITION")
    error(sluice(server, "datasets", "commit", f"{NS}.events@999"), 1, "NOT_FOUND")


# -- jobs: what pending jobs wait for --------------------------------------------------------------

def test_pending_jobs_say_what_their_trigger_waits_for(server, tmp_path):
    waiting = create(server, "two_needed", "--count", "2", "--enabled")
    quiet = create(server, "quiet", "--trigger", "quiet-period", "--quiet-seconds", "3600", "--enabled")
    spec = tmp_path / "either.json"
    spec.write_text(json.dumps({
        "name": "either", "enabled": True, "program": {"namespace": NS, "app": "jobs", "program": "daily"},
        "trigger": {"or": {"any_of": [{"partition": {"namespace": NS, "dataset": "either", "count": 24}},
                                      {"time": {"cron": "0 2 * * *", "zone": "Asia/Tokyo"}}]}}}))
    either = json.loads(ok(sluice(server, "schedules", "create", "--file", str(spec), "--json")))
    for dataset in ("two_needed", "quiet", "either"):
        ok(sluice(server, "notify", "partition", "--namespace", NS, "--dataset", dataset, "--key", "hour=01",
                  "--location", f"/data/{dataset}/1"))

    def rows() -> dict[str, str]:
        lines = ok(sluice(server, "jobs", "list", "--pending")).splitlines()[2:]
        found = {line.split()[1]: line for line in lines if "PENDING_TRIGGER" in line}
        return found if len(found.keys() & {waiting["id"][:8], quiet["id"][:8], either["id"][:8]}) == 3 else {}

    found = eventually(rows, what="the three pending jobs listed")
    assert f"trigger: 1 of 2 partitions of {NS}.two_needed" in found[waiting["id"][:8]]
    assert "trigger: quiet until " in found[quiet["id"][:8]] and f"3600s without data of {NS}.quiet" in found[quiet["id"][:8]]
    assert f"(1 of 24 partitions of {NS}.either) or (cron at 02:00 Asia/Tokyo)" in found[either["id"][:8]]


# -- runs: a failed run's error, a missing program ----------------------------------------------

def test_a_failed_run_leads_with_the_exception_and_a_missing_program_names_its_file(server):
    boom = create(server, "boom", "--enabled", program="boom")
    missing = create(server, "missing", "--enabled", program="not_there")
    for dataset in ("boom", "missing"):
        ok(sluice(server, "notify", "partition", "--namespace", NS, "--dataset", dataset, "--key", "hour=01",
                  "--location", f"/data/{dataset}/1"))

    def failed(schedule: dict) -> list[dict]:
        runs = json.loads(ok(sluice(server, "runs", "list", "--schedule", schedule["id"][:8], "--json")))
        return [r for r in runs if r["status"] == "FAILED"]

    (run,) = eventually(lambda: failed(boom), what="boom's run FAILED")
    assert run["error"].startswith("exit code 1: ValueError: bad input | ")
    table = ok(sluice(server, "runs", "list", "--schedule", boom["id"][:8]))
    assert "exit code 1: ValueError: bad input" in table.splitlines()[2]
    detail = json.loads(ok(sluice(server, "runs", "get", run["id"][:8])))
    assert detail["id"] == run["id"] and detail["error"].startswith("exit code 1: ValueError: bad input | ")

    (gone,) = eventually(lambda: failed(missing), what="the missing program's run FAILED")
    assert gone["error"] == f"program {NS}.jobs.not_there has no entry point: no file {server.apps}/jobs/not_there.py"


def test_program_status_triggers_accept_programs_not_deployed_yet(server):
    made = sluice(server, "schedules", "create", "--name", "after_upstream", "--namespace", NS, "--app", "jobs",
                  "--program", "daily", "--trigger", "program-status", "--upstream", "elsewhere.etl.never_deployed")
    assert ok(made).startswith("created schedule ")


# -- apps deploy -------------------------------------------------------------------------------------

def test_deploy_never_deletes_unnamed_schedules_without_prune(server, tmp_path):
    by_cli = json.loads(ok(sluice(server, "--json", "schedules", "create", "--name", "ops_made", "--namespace", "shop",
                                  "--app", "store", "--program", "report", "--dataset", "shop.orders")))

    def app_file(*names: str) -> str:
        path = tmp_path / "app.json"
        path.write_text(json.dumps({
            "namespace": "shop", "app": "store", "programs": [{"name": "report"}],
            "schedules": [{"name": name, "program": {"namespace": "shop", "app": "store", "program": "report"},
                           "trigger": {"partition": {"namespace": "shop", "dataset": "orders", "count": 1}}}
                          for name in names]}))
        return str(path)

    first = ok(sluice(server, "apps", "deploy", "--no-update-schedules", app_file("nightly")))
    assert first.strip() == "deployed shop.store: created 1, updated 0, deleted 0 schedule(s)"
    names = lambda: sorted(s["name"] for s in json.loads(ok(sluice(server, "--json", "schedules", "list",
                                                                   "--app", "store"))))
    assert names() == ["nightly", "ops_made"]
    ok(sluice(server, "apps", "deploy", "--no-update-schedules", app_file()))
    assert names() == ["nightly", "ops_made"]
    error(sluice(server, "apps", "deploy", app_file("nightly")), 1,
          "FAILED_PRECONDITION: deploying shop.store would delete 1 schedule(s) it does not name: ops_made")
    assert names() == ["nightly", "ops_made"]
    pruned = ok(sluice(server, "apps", "deploy", "--yes", app_file("nightly")))
    assert pruned.strip() == "deployed shop.store: created 0, updated 0, deleted 1 schedule(s): ops_made"
    assert names() == ["nightly"]
    error(sluice(server, "schedules", "get", by_cli["id"][:8]), 1, "NOT_FOUND")


# -- usage errors --------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, text", [
    (["schedules", "get"], "the following arguments are required: id"),
    (["schedules", "update"], "the following arguments are required: id"),
    (["schedules", "frobnicate"], "invalid choice: 'frobnicate'"),
    (["schedules", "create", "--name", "x"], "--namespace is required (or --file)"),
    (["datasets", "add", "--key", "a=1", "--location", "/x"], "give NAMESPACE.NAME, or --transaction ID"),
])
def test_usage_errors_exit_2(server, args, text):
    """argparse's own errors are its usage line, then the error; the CLI's are one line."""
    result = sluice(server, *args)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("sluice") and text in result.stderr, result.stderr
