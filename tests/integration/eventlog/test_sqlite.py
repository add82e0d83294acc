"""The SQLite adapter against the event-log contract, plus what only SQLite has: a shared file."""
from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from sluice.clock import Clock
from sluice.eventlog import NO_STREAM, EventLog, EventLogNotMigrated, WrongExpectedVersion
from sluice.eventlog.sqlite import SCHEMA_VERSION, SqliteEventLog

from tests.integration.eventlog.contract import DurableEventLogContract, EventLogContract, new_events


def _file(tmp_path: Path) -> Path:
    return tmp_path / "store" / "events.db"  # a parent directory the adapter has to create


class TestSqliteFileEventLog(DurableEventLogContract):
    def make_log(self, tmp_path: Path, clock: Clock) -> EventLog:
        return SqliteEventLog(_file(tmp_path), clock=clock)

    def reopen(self, log: EventLog, tmp_path: Path, clock: Clock) -> EventLog:
        log.close()
        return SqliteEventLog(_file(tmp_path), clock=clock)

    def open_instance(self, tmp_path: Path, clock: Clock, poll_interval: float) -> EventLog:
        return SqliteEventLog(_file(tmp_path), clock=clock, poll_interval=poll_interval)


class TestSqliteMemoryEventLog(EventLogContract):
    def make_log(self, tmp_path: Path, clock: Clock) -> EventLog:
        return SqliteEventLog(":memory:", clock=clock)


def test_instances_on_the_same_file_serialise_their_writes(tmp_path: Path) -> None:
    logs = [SqliteEventLog(_file(tmp_path)) for _ in range(3)]  # as if three processes
    try:
        def write(log: SqliteEventLog) -> None:
            for _ in range(20):
                while True:
                    try:
                        log.append("shared", new_events(1), log.stream_version("shared"))
                        break
                    except WrongExpectedVersion:
                        continue

        threads = [threading.Thread(target=write, args=(log,)) for log in logs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        assert [e.version for e in logs[0].read_stream("shared")] == list(range(60))
        assert logs[1].read_all(limit=100) == logs[2].read_all(limit=100) == logs[0].read_stream("shared")
    finally:
        for log in logs:
            log.close()


def test_a_filtered_read_walks_the_position_index(tmp_path: Path) -> None:
    log = SqliteEventLog(_file(tmp_path))
    try:
        sql, params = log.read_all_query(10, 500, ["schedule-", "matcher-"])
        plan = log._conn.execute("EXPLAIN QUERY PLAN " + sql.format(p="?"), params).fetchall()
        assert [row[3] for row in plan] == ["SEARCH events USING INTEGER PRIMARY KEY (rowid>?)"]
    finally:
        log.close()


def test_an_append_finds_a_long_streams_version_without_walking_it(tmp_path: Path) -> None:
    log = SqliteEventLog(_file(tmp_path))

    def steps_to_append(stream: str) -> int:
        expected = log.stream_version(stream)
        steps = 0

        def count() -> int:
            nonlocal steps
            steps += 1
            return 0

        log._conn.set_progress_handler(count, 1)
        try:
            log.append(stream, new_events(1), expected)
        finally:
            log._conn.set_progress_handler(None, 1)
        return steps

    try:
        log.append("short", new_events(5), NO_STREAM)
        for _ in range(20):
            log.append("long", new_events(250), log.stream_version("long"))
        assert steps_to_append("long") < 2 * steps_to_append("short")
    finally:
        log.close()


_SCHEMA_0 = """
CREATE TABLE events (
    position    INTEGER PRIMARY KEY AUTOINCREMENT,
    id          TEXT    NOT NULL UNIQUE,
    stream      TEXT    NOT NULL,
    version     INTEGER NOT NULL,
    type        TEXT    NOT NULL,
    data        BLOB    NOT NULL,
    metadata    TEXT    NOT NULL,
    recorded_at TEXT    NOT NULL,
    UNIQUE (stream, version)
);
CREATE TABLE checkpoints (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE snapshots (name TEXT PRIMARY KEY, position INTEGER NOT NULL, schema TEXT NOT NULL, data BLOB NOT NULL);
"""
"""The file's schema before streams were numbered (user_version 0): what earlier releases wrote."""


def test_a_file_of_before_the_streams_table_is_brought_to_todays_schema_with_its_events(tmp_path: Path) -> None:
    path = _file(tmp_path)
    path.parent.mkdir(parents=True)
    old = sqlite3.connect(path)
    old.executescript(_SCHEMA_0)
    rows = [(f"e{n}", stream, version, "Happened", f'{{"n":{n}}}'.encode(), meta, "2026-11-20T10:00:00+00:00")
            for n, (stream, version, meta) in enumerate([("a", 0, "{}"), ("b", 0, '{"k":"v"}'), ("a", 1, "{}")])]
    old.executemany("INSERT INTO events (id, stream, version, type, data, metadata, recorded_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    old.execute("INSERT INTO checkpoints VALUES ('relay', 2)")
    old.execute("UPDATE sqlite_sequence SET seq = 7 WHERE name = 'events'")  # positions 4-7 were used, then lost
    old.commit()
    old.close()

    log = SqliteEventLog(path)
    try:
        assert [(e.position, e.id, e.stream, e.version, e.data, e.metadata) for e in log.read_all()] == [
            (1, "e0", "a", 0, b'{"n":0}', {}), (2, "e1", "b", 0, b'{"n":1}', {"k": "v"}),
            (3, "e2", "a", 1, b'{"n":2}', {})]
        assert log.stream_version("a") == 1 and log.read_checkpoint("relay") == 2
        with pytest.raises(WrongExpectedVersion):
            log.append("a", new_events(1), 0)
        log.append("a", new_events(1), 1)
        log.append("c", new_events(1), NO_STREAM)
        assert [(e.stream, e.version, e.position) for e in log.read_all(after=3)] == [("a", 2, 8), ("c", 0, 9)]
        assert [e.version for e in log.read_stream("a")] == [0, 1, 2]
    finally:
        log.close()
    log = SqliteEventLog(path)  # opened again: already migrated, nothing changes
    try:
        assert log._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert [e.position for e in log.read_all()] == [1, 2, 3, 8, 9]
    finally:
        log.close()


def test_a_file_of_a_newer_schema_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    path = _file(tmp_path)
    SqliteEventLog(path).close()
    newer = sqlite3.connect(path)
    newer.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    newer.close()

    with pytest.raises(EventLogNotMigrated, match=f"schema version {SCHEMA_VERSION + 1}, newer than this release's"):
        SqliteEventLog(path)
    again = sqlite3.connect(path)
    assert again.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1
    again.close()
