"""e2e-latency (bench/e2e_latency.py): the CPU of the service processes, read from /proc."""
from __future__ import annotations

import os
import sys

import pytest

from bench.e2e_latency import cpu_seconds_of_stat, process_cpu_seconds

pytestmark = pytest.mark.bench  # runs a benchmark: `make test` keeps it, `make test-fast` leaves it out

TICKS = os.sysconf("SC_CLK_TCK")


def stat_line(command: str, utime: int, stime: int) -> str:
    """A /proc/<pid>/stat line: pid, (comm), then fields 3.. with utime and stime at 14 and 15."""
    fields_3_to_13 = ["S", "1", "1", "1", "0", "-1", "4194304", "100", "0", "0", "0"]
    return " ".join(["4242", f"({command})", *fields_3_to_13, str(utime), str(stime), "7", "8", "20", "0"]) + "\n"


def test_cpu_is_user_plus_system_time_in_seconds():
    assert cpu_seconds_of_stat(stat_line("python", 3 * TICKS, 2 * TICKS)) == 5.0


def test_a_command_name_with_spaces_and_parentheses_does_not_shift_the_fields():
    assert cpu_seconds_of_stat(stat_line("a) (b c", TICKS, 0)) == 1.0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/<pid>/stat is Linux's")
def test_a_live_process_cpu_is_read_from_proc():
    sum(range(2_000_000))  # some CPU of its own, so the figure is not zero at a coarse tick
    assert process_cpu_seconds(os.getpid()) > 0
