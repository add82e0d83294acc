"""Shared fixtures. Under CI=true a skipped test fails the run: integration tests must run there."""
from __future__ import annotations

import os
import socket
from typing import Iterator

import pytest
from hypothesis import settings

from tests.support.postgres import PostgresNotInstalled, PostgresServer

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# CI runs the same examples every time (a failure there is reproducible) and never fails a
# property on time alone: a loaded 2-core machine is slow, not wrong.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if IN_CI else "dev")

# The Spark JVMs tests start (spark-submit's drivers, through the launcher's SPARK_* allowlist; the
# tests' own SparkSession; a standalone cluster's master and workers) run C1 only with the serial GC:
# half the CPU to start on 2 cores, and a test's data is too small for C2 to pay back. Yours win if set.
for _variable in ("SPARK_SUBMIT_OPTS", "SPARK_DAEMON_JAVA_OPTS"):
    os.environ.setdefault(_variable, "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if IN_CI and report.skipped and not _allowed_skip(item):
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, which is not allowed: {report.longrepr}"


def _allowed_skip(item) -> bool:
    """Tests that need a server this machine cannot run (a KurrentDB URL) may skip, by marker."""
    return item.get_closest_marker("external_server") is not None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One real PostgreSQL server for the session; each test takes a fresh database on it
    (`postgres.create_database()`). Without the binaries (`make postgres`) the tests using it fail
    with that hint instead of skipping."""
    try:
        server = PostgresServer()
    except PostgresNotInstalled as missing:
        pytest.fail(str(missing), pytrace=False)
    with server:
        yield server
