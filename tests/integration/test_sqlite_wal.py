"""The event log's and the bus's SQLite files are checkpointed by a background thread, never inside a
commit: the writer's automatic checkpoints are off, and the WAL's pages still reach the database file."""
from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from sluice.bus.inprocess_store import BusStore
from sluice.bus.port import TopicPartition, TopicSpec
from sluice.eventlog import NO_STREAM
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.sqlite_wal import WalCheckpointer

COMMITS = 200

from tests.integration.eventlog.contract import new_events
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

TIMEOUT = 10.0


def checkpointer_threads() -> int:
    return sum(thread.name == "sluice-wal-checkpoints" for thread in threading.enumerate())


def test_the_event_logs_commits_never_checkpoint_and_the_thread_moves_the_wal_into_the_file(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    log = SqliteEventLog(path)
    try:
        assert log._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        empty = path.stat().st_size
        for version in range(COMMITS):
            log.append("s", new_events(1), version - 1)
        eventually(lambda: log._checkpointer.checkpoints >= 1 and path.stat().st_size > empty, TIMEOUT,
                   "a background checkpoint copied the WAL's pages into the database file", interval=0.01)
    finally:
        log.close()
    assert log._checkpointer is None
    reopened = SqliteEventLog(path)
    try:
        assert reopened.stream_version("s") == COMMITS - 1
    finally:
        reopened.close()


def test_the_bus_files_commits_never_checkpoint_and_the_thread_moves_the_wal_into_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bus.db"
    store = BusStore(path)
    try:
        assert store._db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        store.create_topics([TopicSpec("t", 1)])
        empty = path.stat().st_size
        for n in range(COMMITS):
            store.append([(TopicPartition("t", 0), b"k", b"v" * 200, ())], n)
        eventually(lambda: store._checkpointer.checkpoints >= 1 and path.stat().st_size > empty, TIMEOUT,
                   "a background checkpoint copied the WAL's pages into the bus file", interval=0.01)
    finally:
        store.close()


def test_checkpoints_follow_commits_at_most_one_an_interval_and_closing_stops_the_thread(tmp_path: Path) -> None:
    path = str(tmp_path / "quiet.db")
    writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    writer.execute("PRAGMA journal_mode=WAL")
    before = checkpointer_threads()
    checkpointer = WalCheckpointer(path, writer, interval=1.0)
    try:
        time.sleep(0.3)
        assert checkpointer.checkpoints == 0  # nothing committed, nothing to do
        writer.execute("CREATE TABLE t (x)")
        checkpointer.committed()
        eventually(lambda: checkpointer.checkpoints == 1, TIMEOUT, "a checkpoint after a commit", interval=0.01)
        for _ in range(50):
            writer.execute("INSERT INTO t VALUES (1)")
            checkpointer.committed()
        assert checkpointer.checkpoints == 1  # the next waits for the interval
        eventually(lambda: checkpointer.checkpoints == 2, TIMEOUT, "the next checkpoint, one interval later", interval=0.01)
        assert checkpointer_threads() == before + 1
    finally:
        checkpointer.close()
        writer.close()
    assert checkpointer_threads() == before


def test_memory_logs_and_buses_have_no_checkpointer() -> None:
    log, store = SqliteEventLog(), BusStore(None)
    try:
        assert log._checkpointer is None and store._checkpointer is None
    finally:
        log.close()
        store.close()


def test_both_files_are_durable_at_each_commit(tmp_path: Path) -> None:
    """synchronous=FULL (2) on the event log's and the bus's files: a commit that returned survives a power loss."""
    log, store = SqliteEventLog(tmp_path / "events.db"), BusStore(tmp_path / "bus.db")
    try:
        assert log._conn.execute("PRAGMA synchronous").fetchone()[0] == 2
        assert store._db.execute("PRAGMA synchronous").fetchone()[0] == 2
    finally:
        log.close()
        store.close()


def test_a_wal_grown_past_its_limit_is_truncated(tmp_path: Path) -> None:
    """PASSIVE checkpoints leave the WAL file as large as it grew; past `truncate_above` a TRUNCATE one empties it."""
    path = str(tmp_path / "big.db")
    writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    writer.execute("PRAGMA journal_mode=WAL")
    checkpointer = WalCheckpointer(path, writer, interval=0.01, truncate_above=256 * 1024, truncate_every=3600)
    wal = Path(path + "-wal")
    try:
        writer.execute("CREATE TABLE t (x BLOB)")
        writer.execute("BEGIN")
        for _ in range(400):
            writer.execute("INSERT INTO t VALUES (randomblob(4096))")
        writer.execute("COMMIT")
        grown = wal.stat().st_size
        assert grown > 1024 * 1024
        checkpointer.committed()
        eventually(lambda: checkpointer.truncations >= 1, TIMEOUT, "a TRUNCATE checkpoint", interval=0.01)
        assert wal.stat().st_size == 0 < grown
        assert writer.execute("SELECT count(*) FROM t").fetchone()[0] == 400
    finally:
        checkpointer.close()
        writer.close()


def test_a_wal_is_truncated_periodically_even_when_small(tmp_path: Path) -> None:
    path = str(tmp_path / "small.db")
    writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    writer.execute("PRAGMA journal_mode=WAL")
    checkpointer = WalCheckpointer(path, writer, interval=0.01, truncate_every=0.2)
    try:
        writer.execute("CREATE TABLE t (x)")
        writer.execute("INSERT INTO t VALUES (1)")
        time.sleep(0.3)
        checkpointer.committed()
        eventually(lambda: checkpointer.truncations >= 1, TIMEOUT, "a periodic TRUNCATE checkpoint", interval=0.01)
        assert Path(path + "-wal").stat().st_size == 0
    finally:
        checkpointer.close()
        writer.close()


def modes(path: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mode & 0o777 for p in path.parent.glob(f"{path.name}*")}


@pytest.mark.parametrize("store", ["log", "bus"])
def test_the_log_and_the_bus_files_are_readable_by_their_owner_only(tmp_path, store):
    """Regression: SQLite made them with the umask's mode (0644): any local user, and any program run as
    another user, read every event and message."""
    path = tmp_path / "events.db"
    opened = SqliteEventLog(path) if store == "log" else BusStore(path)
    try:
        if store == "log":
            opened.append("s-1", new_events(1), NO_STREAM)
        assert set(modes(path)) >= {"events.db", "events.db-wal"} and set(modes(path).values()) == {0o600}, modes(path)
    finally:
        opened.close()


def test_a_file_an_older_release_made_readable_by_all_is_narrowed_at_open(tmp_path):
    path = tmp_path / "events.db"
    SqliteEventLog(path).close()
    for file in tmp_path.glob("events.db*"):
        file.chmod(0o644)
    log = SqliteEventLog(path)
    try:
        assert set(modes(path).values()) == {0o600}, modes(path)
    finally:
        log.close()
