"""`sluice schedules create` retry flags against a running standalone."""
from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone

import pytest

from sluice_services.localserver import LocalServer
from tests.integration.test_cli import assert_one_line_error, create_args, sluice

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with LocalServer(tmp_path_factory.mktemp("cli-retry") / "sluice") as running:
        yield running


def test_retry_flags_set_the_schedules_retry_policy_and_unset_ones_keep_their_defaults(server):
    created = sluice(server, "--json", *create_args("retried", "--max-retries", "4", "--retry-delay", "15",
                                                    "--retry-failed"))
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["retryPolicy"] == {"maxRetries": 4, "delay": "15s", "backoff": 2.0,
                                                         "retryFailed": True}
    default = sluice(server, "--json", *create_args("default_retries"))
    assert json.loads(default.stdout)["retryPolicy"] == {"maxRetries": 2, "delay": "60s", "backoff": 2.0}


@pytest.mark.parametrize("extra, text", [
    (["--max-retries", "-1"], "INVALID_ARGUMENT: schedule.retry_policy.max_retries: must be at least 0 (range 0 to 100)"),
    (["--retry-backoff", "0.5"], "INVALID_ARGUMENT: schedule.retry_policy.backoff: must be between 1 and 100"),
])
def test_bad_retry_flags_are_one_line_errors_naming_the_field(server, extra, text):
    assert_one_line_error(sluice(server, *create_args("bad_retries", *extra)), 1, text)


def test_a_triggered_job_carries_its_schedules_retry_policy(server):
    opens = datetime.now(timezone.utc) + timedelta(hours=2)  # the job waits for a window: it is not launched
    window = f"{opens:%H:%M}-{opens + timedelta(minutes=1):%H:%M}"
    created = sluice(server, "--json", *create_args("retried_job", "--dataset", "experiments.cli_retry", "--enabled",
                                                    "--window", window, "--max-retries", "5", "--retry-failed"))
    assert created.returncode == 0, created.stderr
    schedule_id = json.loads(created.stdout)["id"]
    published = sluice(server, "notify", "partition", "--namespace", "experiments", "--dataset", "cli_retry",
                       "--key", "hour=01", "--location", "/tmp/cli_retry/1")
    assert published.returncode == 0, published.stderr
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        jobs = json.loads(sluice(server, "--json", "jobs", "list", "--pending", "--schedule", schedule_id).stdout)
        if jobs and jobs[0]["state"] == "PENDING_CONSTRAINT":
            break
        time.sleep(0.2)
    assert [job["retryPolicy"] for job in jobs] == [{"maxRetries": 5, "delay": "60s", "backoff": 2.0,
                                                     "retryFailed": True}]
