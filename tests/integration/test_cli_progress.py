"""Progress bars of `sluice log stats`, `dlq list` and `rebuild`: drawn on stderr when stdout and stderr
are a terminal (a real pty), absent when they are pipes or with --json, where the output is the plain
result and stderr stays empty."""
from __future__ import annotations

import asyncio
import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time

import pytest

from sluice.bus.inprocess import InProcessBus
from tests.integration.test_sre_cli import data_dir, dead_letter, sluice  # noqa: F401 (data_dir: a fixture)

pytestmark = pytest.mark.integration

BAR = r"\s*\d+%\|"
"""tqdm's bar with a total: `rebuilding registry:  40%|████      | 2/5 [...]`."""


def under_a_terminal(*args: str, timeout: float = 60) -> tuple[int, str]:
    """The command run with stdin, stdout and stderr on a pseudo-terminal: its exit code and all it wrote."""
    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    process = subprocess.Popen([sys.executable, "-m", "sluice_services.cli", *args], stdin=secondary,
                               stdout=secondary, stderr=secondary, close_fds=True)
    os.close(secondary)
    written, deadline = b"", time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([primary], [], [], 0.5)
            if not ready:
                if process.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            written += chunk
        return process.wait(timeout=max(1.0, deadline - time.monotonic())), written.decode("utf-8", "replace")
    finally:
        os.close(primary)
        if process.poll() is None:
            process.kill()
            process.wait()


def test_log_stats_draws_a_bar_on_a_terminal_only(data_dir):  # noqa: F811
    code, written = under_a_terminal("log", "stats", "--data-dir", str(data_dir))
    assert code == 0 and re.search("reading the log:" + BAR, written), written
    assert "head position" in written and "schedule-*" in written

    piped = sluice("log", "stats", "--data-dir", str(data_dir))
    assert piped.returncode == 0 and piped.stderr == ""
    assert piped.stdout.startswith("head position ") and "%|" not in piped.stdout and "\r" not in piped.stdout
    code, written = under_a_terminal("--json", "log", "stats", "--data-dir", str(data_dir))
    assert code == 0 and "%|" not in written and '"head_position"' in written


def test_rebuild_draws_a_bar_per_projection_on_a_terminal_only(data_dir):  # noqa: F811
    code, written = under_a_terminal("rebuild", "registry", "--data-dir", str(data_dir))
    assert code == 0 and re.search("rebuilding registry:" + BAR, written), written
    assert "PROJECTION" in written

    piped = sluice("rebuild", "registry", "--data-dir", str(data_dir))
    assert piped.returncode == 0 and piped.stderr == "" and piped.stdout.startswith("PROJECTION")


def test_dlq_list_counts_the_letters_read_on_a_terminal_only(data_dir):  # noqa: F811
    asyncio.run(dead_letter(InProcessBus(data_dir / "bus.db"), b"\xff poison"))
    code, written = under_a_terminal("dlq", "list", "--data-dir", str(data_dir))
    assert code == 0 and re.search(r"reading dead letters: \d+letter", written), written
    assert "malformed: not a protobuf Notification" in written

    piped = sluice("dlq", "list", "--data-dir", str(data_dir))
    assert piped.returncode == 0 and piped.stderr == "" and piped.stdout.startswith("ID ")
