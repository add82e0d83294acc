"""Seed 000's job queue through the CLI on a real `sluice standalone`: partitions that arrive while a
schedule's job waits for its constraints join that job, and its one run gets all of them
(`--waiting-job join`, the default); `--waiting-job separate` keeps a job and a run per fire."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from sluice_services.localserver import LocalServer
from tests.integration.test_cli_commands import FAKE_SPARK_SUBMIT, NS, create, ok, sluice
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

INTERVAL = 30
"""Seconds between runs: the later partitions (three CLI calls at once) arrive well inside it, also on a
loaded machine."""


PROGRAM = """import json, os, sys
from pathlib import Path

context = json.loads(Path(sys.argv[sys.argv.index("--sluice-context") + 1]).read_text())
result = Path(context["system"]["result_path"])
partial = result.with_name(result.name + ".partial")
partial.write_text(json.dumps({"outputs": [], "inputs": [], "consumed": [], "metrics": {}}))
os.replace(partial, result)
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli-job-queue")
    apps = root / "apps"
    (apps / "jobs").mkdir(parents=True)
    (apps / "jobs" / "spaced.py").write_text(PROGRAM)
    with LocalServer(root / "sluice", args=["--apps-dir", str(apps), "--spark-submit", str(FAKE_SPARK_SUBMIT),
                                            "--spark-master", "local[1]"]) as running:
        running.transactions = root / "transactions"
        yield running


def notify(server, dataset: str, hour: int) -> None:
    ok(sluice(server, "notify", "partition", "--namespace", NS, "--dataset", dataset, "--key", f"hour={hour:02d}",
              "--location", f"/data/{dataset}/{hour}"))


def notifying(server, dataset: str, hour: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "sluice_services.cli", "notify", "partition", "--namespace", NS,
                             "--dataset", dataset, "--key", f"hour={hour:02d}", "--location", f"/data/{dataset}/{hour}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "SLUICE_SERVER": server.address})


def listed(server, what: str, schedule: dict) -> list[dict]:
    return json.loads(ok(sluice(server, what, "list", "--schedule", schedule["id"][:8], "--json")))


def input_hours(run: dict) -> list[str]:
    return [kv["value"] for partition in run.get("inputs", []) for kv in partition["key"] if kv["name"] == "hour"]


def test_partitions_arriving_while_the_job_waits_join_it_and_one_run_gets_them_all(server):
    schedule = create(server, "spaced", "--count", "1", "--min-interval", str(INTERVAL), "--enabled",
                      program="spaced")
    assert schedule.get("waitingJobPolicy", "WAITING_JOB_JOIN") == "WAITING_JOB_JOIN"
    notify(server, "spaced", 1)  # runs at once
    later = [notifying(server, "spaced", hour) for hour in (2, 3, 4)]  # together, inside the interval:
    for process in later:                                              # the first waits, the others join it
        assert process.wait(timeout=60) == 0, process.stderr.read()
    runs = eventually(lambda: (found := listed(server, "runs", schedule)) and len(found) == 2
                    and all(r["status"] == "COMPLETED" for r in found) and found, timeout=INTERVAL + 60)
    assert input_hours(runs[0]) == ["01"] and sorted(input_hours(runs[1])) == ["02", "03", "04"]

    jobs = listed(server, "jobs", schedule)
    assert [job["state"] for job in jobs] == ["LAUNCHED", "LAUNCHED", "JOINED", "JOINED"]
    waited = jobs[1]
    assert waited["runId"] == runs[1]["id"] and waited["notificationsMatched"] == 3
    hours = [kv["value"] for n in waited["context"]["notifications"]
             for p in n["partitionCommitted"]["partitions"] for kv in p["key"]]
    assert sorted(hours) == ["02", "03", "04"]
    assert all(job["reason"] == f"joined job {waited['id']}" for job in jobs[2:])

    table = ok(sluice(server, "jobs", "list", "--schedule", schedule["id"][:8])).splitlines()
    assert sum("JOINED" in line and f"joined job {waited['id']}" in line for line in table) == 2
    run = json.loads(ok(sluice(server, "runs", "get", runs[1]["id"][:8], "--json")))
    assert input_hours(run) == input_hours(runs[1])
    history = ok(sluice(server, "jobs", "history", "--schedule", schedule["id"][:8]))
    assert history.count("more notification") == 2


def test_the_waiting_job_policy_is_set_kept_and_checked(server):
    schedule = create(server, "separate", "--count", "1", "--min-interval", "1", "--waiting-job", "separate",
                      "--enabled", program="spaced")
    assert schedule["waitingJobPolicy"] == "WAITING_JOB_SEPARATE"
    updated = json.loads(ok(sluice(server, "schedules", "update", schedule["id"][:8], "--waiting-job", "join",
                                   "--json")))
    assert updated.get("waitingJobPolicy", "WAITING_JOB_JOIN") == "WAITING_JOB_JOIN"
    refused = sluice(server, "schedules", "update", schedule["id"][:8], "--waiting-job", "merge")
    assert refused.returncode == 2 and "argument --waiting-job: invalid choice: 'merge'" in refused.stderr
    again = json.loads(ok(sluice(server, "schedules", "update", schedule["id"][:8], "--priority", "3", "--json")))
    assert again.get("waitingJobPolicy", "WAITING_JOB_JOIN") == "WAITING_JOB_JOIN"  # kept when not given
    usage = sluice(server, "schedules", "create", "--help")
    assert "--waiting-job {join,separate}" in ok(usage)
