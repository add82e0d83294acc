"""SqliteEventLog's deferred appends against their contract (deferred_contract.py), plus what only SQLite
has: an in-memory log, and a failed fsync."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from sluice.eventlog.deferred import DurabilityLost, deferring
from sluice.eventlog.port import NO_STREAM
from sluice.eventlog.sqlite import SqliteEventLog
from tests.integration.eventlog.deferred_contract import NEVER, DeferredAppendsContract, event, served

pytestmark = pytest.mark.integration


@pytest.fixture
def log(tmp_path: Path):
    log = SqliteEventLog(tmp_path / "events.db", poll_interval=NEVER)
    yield log
    log.close()


class TestSqliteDeferredAppends(DeferredAppendsContract):
    def flushes(self, log: SqliteEventLog) -> int:
        return log.durability_flushes


async def test_an_in_memory_log_never_defers():
    log = SqliteEventLog()
    following = log.subscribe_batches(0)
    with deferring():
        log.append("s", [event("a")], NO_STREAM)
    assert await served(following) == ["a"]
    log.close()


async def test_a_failed_fsync_is_not_taken_for_an_outage(log, monkeypatch):
    with deferring() as appends:
        log.append("s", [event("a")], NO_STREAM)

    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(os, "fdatasync", failing)
    with pytest.raises(DurabilityLost, match="Input/output error") as raised:
        await appends.durable()
    assert raised.value.__cause__ is None  # sluice.runtime.errors would wait an OSError out


def test_opening_a_file_fsyncs_what_another_process_committed_without_its_fsync(log, tmp_path, monkeypatch):
    """Another process's deferred commits (one killed before their fsync, whose restart this is) are fsynced
    when the file is opened: its subscribers serve them as durable."""
    with deferring():
        log.append("s", [event("a")], NO_STREAM)
    assert log.commits_held_back == 1
    synced: list[str] = []
    fdatasync = os.fdatasync

    def recording(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        fdatasync(fd)
    monkeypatch.setattr(os, "fdatasync", recording)
    reopened = SqliteEventLog(tmp_path / "events.db", poll_interval=NEVER)
    try:
        assert synced == [str(tmp_path / "events.db-wal")]
        assert [e.id for e in reopened.read_all(0)] == ["a"]
    finally:
        reopened.close()


def test_each_commit_runs_with_the_synchronous_mode_it_needs(log):
    """A deferred append commits with NORMAL (no fsync), any other with FULL (its own fsync); the mode is
    switched only when the next commit needs the other one, so polls of deferred appends switch nothing."""
    def mode() -> int:
        return log._conn.execute("PRAGMA synchronous").fetchone()[0]
    statements: list[str] = []
    log._conn.set_trace_callback(statements.append)
    with deferring():
        log.append("s", [event("a")], NO_STREAM)
        assert mode() == 1  # NORMAL
        log.append("s", [event("b")], 0)
    log.append("s", [event("c")], 1)
    assert mode() == 2  # FULL
    log.append("s", [event("d")], 2)
    assert [s for s in statements if s.startswith("PRAGMA synchronous=")] == \
        ["PRAGMA synchronous=NORMAL", "PRAGMA synchronous=FULL"]
