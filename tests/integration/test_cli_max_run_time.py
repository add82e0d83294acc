"""`sluice schedules create|update --max-run-time DURATION` against a running standalone: the schedule keeps
its run time limit, update changes or (0) removes it, and a bad one is a one-line error naming the field."""
from __future__ import annotations

import json

import pytest

from sluice_services.localserver import LocalServer
from tests.integration.test_cli import assert_one_line_error, create_args, sluice

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with LocalServer(tmp_path_factory.mktemp("cli-max-run") / "sluice") as running:
        yield running


def test_a_schedules_time_limit_is_set_changed_and_removed(server):
    created = sluice(server, "--json", *create_args("limited", "--max-run-time", "1h30m"))
    assert created.returncode == 0, created.stderr
    schedule = json.loads(created.stdout)
    assert schedule["maxRunSeconds"] == 5400
    kept = sluice(server, "--json", "schedules", "update", schedule["id"], "--priority", "3")
    assert json.loads(kept.stdout)["maxRunSeconds"] == 5400, kept.stderr
    changed = sluice(server, "--json", "schedules", "update", schedule["id"], "--max-run-time", "45s")
    assert json.loads(changed.stdout)["maxRunSeconds"] == 45, changed.stderr
    removed = sluice(server, "--json", "schedules", "update", schedule["id"], "--max-run-time", "0")
    assert "maxRunSeconds" not in json.loads(removed.stdout), removed.stderr


def test_a_schedule_created_without_one_has_no_limit(server):
    created = sluice(server, "--json", *create_args("unlimited"))
    assert created.returncode == 0, created.stderr
    assert "maxRunSeconds" not in json.loads(created.stdout)


@pytest.mark.parametrize("given, code, text", [
    ("31d", 1, "INVALID_ARGUMENT: schedule.max_run_seconds: must be at most 2592000"),
    ("ten minutes", 2, "--max-run-time: expected a duration"),
])
def test_a_bad_time_limit_is_a_one_line_error(server, given, code, text):
    assert_one_line_error(sluice(server, *create_args("bad_limit", "--max-run-time", given)), code, text)
