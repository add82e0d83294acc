"""`sluice serve web` logs as every other service does: --log-format json gives one JSON object per line on
stderr, --log-level INFO its start line, text the usual format; a bad format is a one-line error."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.support.console import REPO

pytestmark = pytest.mark.integration


def serve_web(*options: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen([sys.executable, "-m", "sluice_services.cli", "--server", "127.0.0.1:1", "serve", "web",
                             "--web-port", "0", *options], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)


def started_then_stopped(*options: str) -> tuple[str, str]:
    """The ready line on stdout, and all of stderr once the console is stopped by its pid."""
    web = serve_web(*options)
    try:
        ready = web.stdout.readline()
    finally:
        os.kill(web.pid, signal.SIGTERM)
        _, errors = web.communicate(timeout=30)
    assert ready.startswith("sluice web ready on 127.0.0.1:"), ready + errors
    assert web.returncode == 0, errors
    return ready, errors


def test_json_log_lines_at_the_level_asked_for():
    ready, errors = started_then_stopped("--log-format", "json", "--log-level", "INFO")
    lines = [json.loads(line) for line in errors.splitlines()]
    started = next(line for line in lines if line["logger"] == "sluice_services.web.server")
    port = ready.split(" ready on 127.0.0.1:")[1].split()[0]
    assert started["level"] == "INFO" and started["service"] == "web"
    assert started["message"].startswith(f"web console serving on 127.0.0.1:{port}, reading registry 127.0.0.1:1")


def test_text_lines_by_default_and_nothing_below_the_level():
    _, errors = started_then_stopped("--log-level", "INFO")
    assert " INFO sluice_services.web.server: web console serving on 127.0.0.1:" in errors
    assert not errors.lstrip().startswith("{")
    _, quiet = started_then_stopped()
    assert "web console serving" not in quiet


def test_an_unknown_log_format_is_a_one_line_error():
    web = serve_web("--log-format", "xml")
    out, errors = web.communicate(timeout=30)
    assert web.returncode == 2 and out == "", errors
    (line,) = errors.strip().splitlines()
    assert line == "sluice: error: --log-format: must be text or json, got 'xml'", line
