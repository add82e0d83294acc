"""The SQLite adapter against the event-log contract, plus what only SQLite has: a shared file."""
from __future__ import annotations

import threading
from pathlib import Path

from sluice.clock import Clock
from sluice.eventlog import NO_STREAM, EventLog, WrongExpectedVersion
from sluice.eventlog.sqlite import SqliteEventLog

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
