"""`--log-format json --log-level INFO`: every stderr line of a real standalone is one JSON object,
and a job's way from its trigger to its run's end can be followed by its ids (job transitions,
launches, retries and dead letters each a line at INFO or above). The formatter and the option on
their own too."""
from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from sluice.runtime.logs import JsonFormatter, configure_logging
from tests.integration.test_metrics_endpoint import add_workload_schedules, send_malformed_notification
from tests.support.console import FAKE_SPARK_SUBMIT, PROGRAM, REPO, load_demo_data

pytestmark = pytest.mark.integration


def test_a_json_line_carries_the_ids_given_and_the_exception():
    record = logging.LogRecord("sluice.journal", logging.INFO, __file__, 1, "job %s admitted", ("j1",), None)
    record.__dict__.update(job_id="j1", schedule_id="s1", run_id="", state="PENDING_LAUNCH")
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "job j1 admitted" and line["level"] == "INFO" and line["logger"] == "sluice.journal"
    assert (line["job_id"], line["schedule_id"], line["state"]) == ("j1", "s1", "PENDING_LAUNCH")
    assert "run_id" not in line and line["time"].endswith("Z")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        failed = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    assert "RuntimeError: boom" in json.loads(JsonFormatter().format(failed))["exception"]
    with pytest.raises(ValueError, match="text, json"):
        configure_logging("INFO", "xml")


def test_a_bad_log_format_is_one_error_line_naming_the_option(tmp_path):
    done = subprocess.run([sys.executable, "-m", "sluice_services.cli", "standalone", "--data-dir", str(tmp_path),
                           "--log-format", "xml"], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "--log-format: must be text or json, got 'xml'" in done.stderr, done.stderr


def start(root: Path) -> tuple[subprocess.Popen, str, Path]:
    apps = root / "apps" / "analytics"
    apps.mkdir(parents=True)
    (apps / "count.py").write_text(PROGRAM)
    (apps / "fail.py").write_text("raise SystemExit('fails on purpose')\n")
    env = {key: v for key, v in os.environ.items() if not key.startswith("SLUICE_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")]))
    stderr = root / "stderr.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "sluice_services.cli", "standalone", "--data-dir", str(root / "data"), "--port", "0",
         "--spark-submit", str(FAKE_SPARK_SUBMIT), "--spark-master", "local[1]", "--apps-dir", str(root / "apps"),
         "--log-level", "INFO", "--log-format", "json"],
        stdout=subprocess.PIPE, stderr=stderr.open("wb"), env=env, text=True)
    line = process.stdout.readline()
    if " ready on " not in line:
        process.kill()
        process.wait()
        raise AssertionError(f"standalone did not start: {stderr.read_text()[-2000:]}")
    return process, line.split(" ready on ")[1].split()[0], stderr


def lines(stderr: Path) -> list[dict]:
    return [json.loads(line) for line in stderr.read_text().splitlines() if line.strip()]


def test_a_job_can_be_followed_by_its_ids_through_json_lines(tmp_path):
    process, address, stderr = start(tmp_path)
    try:
        add_workload_schedules(address)
        with grpc.insecure_channel(address) as channel:
            ids = load_demo_data(channel, "", tmp_path / "data")
        asyncio.run(send_malformed_notification(tmp_path / "data"))
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            text = stderr.read_text()
            if '"run completed"' in text and '"event": "RunRetryScheduled"' in text and "dead-letter" in text:
                break
            time.sleep(0.3)
    finally:
        os.kill(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
        process.stdout.close()

    found = lines(stderr)                                      # every line parses: nothing but JSON on stderr
    journal = [line for line in found if line["logger"] == "sluice.journal"]
    hourly = ids["hourly_counts"]
    events = [line["event"] for line in journal if line.get("schedule_id") == hourly]
    for event in ("JobTriggered", "JobsAdmitted", "RunRequested", "RunStarted", "RunCompleted"):
        assert event in events, (event, events)
    job_id = next(line["job_id"] for line in journal if line["event"] == "RunRequested"
                  and line["schedule_id"] == hourly)
    run_id = next(line["run_id"] for line in journal if line["event"] == "RunRequested" and line["job_id"] == job_id)
    followed = [line["event"] for line in journal if line.get("job_id") == job_id]
    assert followed[0] in ("JobCreated", "NotificationMatched", "JobTriggered") and "RunStarted" in followed and "RunCompleted" in followed
    started = next(line for line in journal if line["event"] == "RunStarted" and line["run_id"] == run_id)
    assert started["level"] == "INFO" and started["message"].startswith("run attempt 1 started, pid ")
    assert started["service"] == "launcher" and started["schedule_id"] == hourly
    assert any(line["event"] == "RunRetryScheduled" and line.get("schedule_id") for line in journal)
    assert any(line["level"] == "WARNING" and "dead-letter" in line["message"] for line in found)
    assert any(line["event"] == "JobDeferred" for line in journal)
