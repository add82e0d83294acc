"""`sluice apps pause|resume|get|list|delete` against a running standalone: a paused app fires nothing
(its waiting job is discarded, a notification while paused is never matched), a schedule created in it is
paused, resume gives each schedule back its own enabled; deleting a live app is refused, a paused one
goes with all its schedules."""
from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone

import pytest

from sluice.cli.output import jsonable
from sluice.client import SluiceClient
from sluice.domain.common import PartitionRef
from sluice.v1 import notifications_pb2, schedules_pb2
from sluice_services.localserver import LocalServer
from tests.integration.test_cli import assert_one_line_error, sluice

pytestmark = pytest.mark.integration

SCOPE = ("--namespace", "experiments", "--app", "pausable")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with LocalServer(tmp_path_factory.mktemp("cli-apps") / "sluice") as running:
        yield running


def create(server, name: str, enabled: bool = True) -> dict:
    """Through gRPC (the CLI's create is tested elsewhere): the schedule as `--json` shows it."""
    opens = datetime.now(timezone.utc) + timedelta(hours=2)  # jobs wait for this window, never launch
    window = schedules_pb2.TimeWindowConstraint(start=f"{opens:%H:%M}", end=f"{opens + timedelta(minutes=1):%H:%M}")
    message = schedules_pb2.Schedule(
        name=name, program=notifications_pb2.ProgramRef(namespace="experiments", app="pausable", program="p"),
        trigger=schedules_pb2.Trigger(partition=schedules_pb2.PartitionTrigger(namespace="experiments",
                                                                               dataset="cli_pause", count=1)),
        constraints=[schedules_pb2.Constraint(time_window=window)], enabled=enabled)
    with SluiceClient(server.address) as client:
        return jsonable(client.create_schedule(message))


def notify(server, hour: str) -> None:
    with SluiceClient(server.address) as client:
        client.publish_partitions("experiments", "cli_pause", [PartitionRef({"hour": hour}, f"/tmp/cli_pause/{hour}")])


def jobs_when(server, schedule_id: str, done) -> list[dict]:
    deadline = time.monotonic() + 30
    with SluiceClient(server.address) as client:
        while True:
            jobs = [jsonable(job) for job in client.list_jobs(schedule_id)]
            if done(jobs) or time.monotonic() > deadline:
                return jobs
            time.sleep(0.1)


def hours_of(job: dict) -> list[str]:
    return [kv["value"] for n in job["context"]["notifications"] for p in n["partitionCommitted"]["partitions"]
            for kv in p["key"]]


def app(server) -> dict:
    got = sluice(server, "--json", "apps", "get", *SCOPE)
    assert got.returncode == 0, got.stderr
    return json.loads(got.stdout)


def test_a_paused_app_fires_nothing_and_resumes_as_it_was(server):
    live = create(server, "live")
    off = create(server, "off", enabled=False)
    notify(server, "01")
    waiting = jobs_when(server, live["id"], lambda jobs: jobs and jobs[0]["state"] == "PENDING_CONSTRAINT")
    assert [j["state"] for j in waiting] == ["PENDING_CONSTRAINT"], waiting

    paused = sluice(server, "apps", "pause", *SCOPE)
    assert paused.stdout.strip() == "paused experiments.pausable: 2 schedule(s) paused", paused.stderr
    discarded = jobs_when(server, live["id"], lambda jobs: jobs and jobs[0]["state"] == "DISCARDED")
    assert [j["state"] for j in discarded] == ["DISCARDED"], discarded
    again = sluice(server, "--json", "apps", "pause", *SCOPE)
    assert json.loads(again.stdout) == {"scope": "experiments.pausable", "changed": False, "schedules": 0}
    late = create(server, "late")
    assert late["paused"] is True and late["enabled"] is True
    listed = sluice(server, "schedules", "list", *SCOPE).stdout
    assert listed.count("yes (paused)") == 2 and listed.count("no (paused)") == 1, listed
    assert app(server) | {"programs": None} == {"namespace": "experiments", "app": "pausable", "paused": True,
                                                "schedules": 3, "enabledSchedules": 2, "programs": None}
    notify(server, "02")  # while paused: matched by nothing

    resumed = sluice(server, "apps", "resume", *SCOPE)
    assert resumed.stdout.strip() == "resumed experiments.pausable: 3 schedule(s) resumed", resumed.stderr
    notify(server, "03")
    jobs = jobs_when(server, late["id"], lambda jobs: jobs and jobs[-1]["state"] == "PENDING_CONSTRAINT")
    assert [hours_of(j) for j in jobs] == [["03"]], jobs
    jobs = jobs_when(server, live["id"], lambda jobs: len(jobs) == 2 and jobs[-1]["state"] == "PENDING_CONSTRAINT")
    assert [hours_of(j) for j in jobs] == [["01"], ["03"]], jobs
    got = json.loads(sluice(server, "--json", "schedules", "get", off["id"]).stdout)
    assert not got.get("enabled") and not got.get("paused")
    assert sluice(server, "apps", "resume", *SCOPE).stdout.strip() == "experiments.pausable was not paused"


def test_a_namespace_pause_covers_its_apps_and_lists_as_such(server):
    create(server, "in_namespace")
    paused = sluice(server, "--json", "apps", "pause", "--namespace", "experiments")
    assert json.loads(paused.stdout)["changed"] is True, paused.stderr
    listed = sluice(server, "apps", "list", "--namespace", "experiments").stdout.splitlines()
    row = next(line for line in listed if line.startswith("experiments.pausable "))
    assert "namespace" in row.split(), listed
    listed_json = json.loads(sluice(server, "--json", "apps", "list").stdout)
    assert {"experiments.pausable"} <= {f"{a['namespace']}.{a['app']}" for a in listed_json}
    assert all(a.get("namespacePaused") for a in listed_json if a["namespace"] == "experiments")
    resumed = sluice(server, "apps", "resume", "--namespace", "experiments")
    assert resumed.stdout.startswith("resumed namespace experiments:"), resumed.stderr
    assert not app(server).get("namespacePaused")
    logged = sluice(server, "--json", "log", "show", "app-experiments", "--data-dir", str(server.data_dir))
    assert [(e["type"], e["data"]["app"]) for e in json.loads(logged.stdout)] == [("AppPaused", ""), ("AppResumed", "")]


def test_deleting_a_live_app_is_refused_and_a_paused_one_goes_with_its_schedules(server):
    create(server, "doomed")
    refused = sluice(server, "apps", "delete", *SCOPE)
    assert_one_line_error(refused, 1, "FAILED_PRECONDITION: app experiments.pausable has")
    assert "doomed" in refused.stderr and "pause the app" in refused.stderr
    assert sluice(server, "apps", "pause", *SCOPE).returncode == 0
    deleted = sluice(server, "apps", "delete", *SCOPE)
    assert deleted.returncode == 0 and deleted.stdout.startswith("deleted app experiments.pausable and "), deleted
    assert "doomed" in deleted.stdout
    assert json.loads(sluice(server, "--json", "schedules", "list", *SCOPE).stdout) == []
    assert_one_line_error(sluice(server, "apps", "get", *SCOPE), 1, "NOT_FOUND: app experiments.pausable")
    assert not create(server, "reborn").get("paused")  # the deleted app's pause went with it


@pytest.mark.parametrize("args, code, text", [
    (["apps", "pause", "--namespace", "bad.ns"], 1, "INVALID_ARGUMENT: namespace: must match"),
    (["apps", "get", "--namespace", "experiments"], 2, "--app"),
    (["apps", "delete", "--namespace", "experiments", "--app", "nothing_here"], 1, "NOT_FOUND"),
])
def test_bad_app_commands_are_one_line_errors(server, args, code, text):
    assert_one_line_error(sluice(server, *args), code, text)
