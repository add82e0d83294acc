"""A run log's last lines found by reading it backwards a block at a time (run_logs.tail_offset), and
the tail request's hostile values refused naming tail_lines."""
from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timezone

import pytest

from sluice.domain.common import ProgramRef
from sluice.domain.errors import InvalidArgument
from sluice.domain.jobs import Job, TriggerContext
from sluice.domain.runs import RunRequested, evolve
from sluice_services.launcher import run_logs
from sluice_services.launcher.run_logs import MAX_TAIL_LINES, checked_request, tail_offset


def tail(tmp_path, data: bytes, lines: int, block_bytes: int = 4) -> bytes:
    """The log's part from tail_offset on, as the server streams it."""
    path = tmp_path / "driver.log"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        return data[tail_offset(fd, lines, block_bytes):]
    finally:
        os.close(fd)


def test_an_empty_log_has_no_lines(tmp_path):
    assert tail(tmp_path, b"", 3) == b""


@pytest.mark.parametrize("lines, expected", [(1, b"c\n"), (2, b"b\nc\n"), (3, b"a\nb\nc\n"), (10, b"a\nb\nc\n")])
def test_the_last_lines_of_a_log_ending_with_a_newline(tmp_path, lines, expected):
    assert tail(tmp_path, b"a\nb\nc\n", lines) == expected


@pytest.mark.parametrize("lines, expected", [(1, b"partial"), (2, b"b\npartial"), (3, b"a\nb\npartial")])
def test_a_last_line_without_a_newline_counts_as_a_line(tmp_path, lines, expected):
    assert tail(tmp_path, b"a\nb\npartial", lines) == expected


def test_empty_lines_count(tmp_path):
    assert tail(tmp_path, b"a\n\n\n", 2) == b"\n\n"
    assert tail(tmp_path, b"\n", 1) == b"\n"


def test_lines_longer_than_a_block(tmp_path):
    long_line = b"x" * 50 + b"\n"
    data = b"first\n" + long_line + long_line.replace(b"x", b"y")
    assert tail(tmp_path, data, 1, block_bytes=4) == long_line.replace(b"x", b"y")
    assert tail(tmp_path, data, 2, block_bytes=4) == long_line + long_line.replace(b"x", b"y")
    assert tail(tmp_path, data, 3, block_bytes=7) == data
    assert tail(tmp_path, b"y" * 100, 1, block_bytes=3) == b"y" * 100


@pytest.mark.parametrize("block_bytes", [1, 2, 3, 5, 64 * 1024])
def test_unicode_split_across_blocks_comes_back_whole(tmp_path, block_bytes):
    lines = ["zählen ✓\n", "日本語のログ\n", "🚀 launched\n", "ende"]
    data = "".join(lines).encode()
    for count in range(1, len(lines) + 1):
        assert tail(tmp_path, data, count, block_bytes).decode() == "".join(lines[-count:])


def test_a_log_of_many_blocks_is_read_from_its_end_only(tmp_path):
    path = tmp_path / "driver.log"
    path.write_bytes(b"".join(b"line %d\n" % n for n in range(200_000)))
    reads: list[int] = []

    def counted_pread(fd: int, size: int, offset: int) -> bytes:
        reads.append(size)
        return os.pread(fd, size, offset)
    fd = os.open(path, os.O_RDONLY)
    try:
        offset = tail_offset(fd, 3, pread=counted_pread)
    finally:
        os.close(fd)
    assert path.read_bytes()[offset:] == b"line 199997\nline 199998\nline 199999\n"
    assert sum(reads) <= 1 + run_logs.CHUNK_BYTES


RUN_ID = "run-1"


def get_run(run_id: str):
    at = datetime(2026, 11, 1, tzinfo=timezone.utc)
    job = Job("job-1", "schedule-1", 1, ProgramRef("ns", "app", "prog"), TriggerContext("schedule-1", "daily"), at)
    return evolve(None, RunRequested(RUN_ID, job, at)) if run_id == RUN_ID else None


@pytest.mark.parametrize("tail_lines, from_offset, message", [
    (-1, 0, "must be 0"), (MAX_TAIL_LINES + 1, 0, "must be 0"), (2**31 - 1, 0, "must be 0"),
    (10, 5, "cannot be given with a from_offset")])
def test_hostile_tails_are_refused_naming_tail_lines(tail_lines, from_offset, message):
    with pytest.raises(InvalidArgument, match=message) as raised:
        checked_request(get_run, RUN_ID, 0, from_offset, tail_lines)
    assert raised.value.field == "tail_lines"
    assert checked_request(get_run, RUN_ID, 0, 0, MAX_TAIL_LINES)[1] == 1


def test_a_failed_runs_error_reads_only_the_end_of_a_huge_log(tmp_path):
    """Regression: lead_then_tail read the whole driver log to keep its last 2,000 bytes: a program that printed
    gigabytes and failed took as much of the launcher's memory. Here a 16 GiB (sparse) log, read by a process
    allowed 2 GiB of address space."""
    log = tmp_path / "driver.log"
    with open(log, "wb") as out:
        out.truncate(16 << 30)
        out.seek(0, os.SEEK_END)
        out.write(b"Traceback (most recent call last):\nValueError: bad input\n")
    script = ("import resource, sys; from pathlib import Path\n"
              "resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
              "from sluice_services.launcher.run_logs import lead_then_tail\n"
              "print(lead_then_tail(Path(sys.argv[1])))")
    shown = subprocess.run([sys.executable, "-c", script, str(log)], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert shown.stdout.startswith("ValueError: bad input | "), shown.stdout


@pytest.mark.parametrize("plant", ["fifo", "link"])
def test_a_log_the_program_replaced_with_a_fifo_or_a_link_shows_nothing(tmp_path, plant):
    """Regression: a program could replace its driver.log (its own run dir) with a FIFO, which the launcher,
    failing the run, opened on its event loop and waited on for a writer forever; or with a link to any file."""
    log, elsewhere = tmp_path / "driver.log", tmp_path / "elsewhere"
    elsewhere.write_text("ValueError: not the log\n")
    os.mkfifo(log) if plant == "fifo" else log.symlink_to(elsewhere)
    script = "import sys; from pathlib import Path\n" \
             "from sluice_services.launcher.run_logs import lead_then_tail\nprint(repr(lead_then_tail(Path(sys.argv[1]))))"
    shown = subprocess.run([sys.executable, "-c", script, str(log)], capture_output=True, text=True, timeout=20)
    assert (shown.returncode, shown.stdout) == (0, "''\n"), shown.stderr[-2000:]
