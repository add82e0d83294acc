"""SQLite adapter of the event-log port: one file (or memory), one connection, WAL journal.

Writers are serialised by BEGIN IMMEDIATE, so positions (the AUTOINCREMENT rowid) are
assigned in commit order and `read_all` can never skip an event. Subscribers are woken at
once by appends made through this instance and poll for appends from other processes.

The same lock makes the tail of this instance's commits (subscription.Tail) exact: a transaction's
inserts take consecutive rowids (nobody else writes until it commits, and AUTOINCREMENT takes the
largest rowid ever used plus one), and every lower position was committed before it began. An
append is recorded after its COMMIT and before the instance's lock is released, so in commit order.

Within `sluice.eventlog.deferred.deferring()` (a consumer's poll that asks for it) an append on a file
commits with synchronous=NORMAL, without its fsync; `durable(ticket)` fsyncs the WAL in a worker thread
for every such commit made so far (a GroupCommit whose flush is `WalFsync`). Until then its events are
held back from subscribers (HeldBack: the tail records them, and reads are bounded to positions before
them, once they are durable), so nothing leaves the process ahead of its durability. Any commit with synchronous=FULL (every other
write) fsyncs the WAL and so makes every earlier one durable too. Opening a file fsyncs its WAL: a
process killed between a deferred commit and its fsync left the commit in the OS's cache only.
"""
from __future__ import annotations

import json
import os
import sqlite3
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Sequence

from sluice.clock import Clock, SystemClock
from sluice.eventlog.sql import SqlEventLogBase
from sluice.eventlog import deferred
from sluice.eventlog.group_commit import GroupCommit
from sluice.sqlite_wal import SYNCHRONOUS, WalCheckpointer, WalFsync, open_wal, private_database
from sluice.eventlog.subscription import HeldBack, Subscribers
from sluice.eventlog.port import (
    NO_STREAM,
    Checkpoint,
    DuplicateEventId,
    EventLogNotMigrated,
    RecordedEvent,
    StreamAppend,
    check_expected_checkpoints,
    check_expected_version,
)

SCHEMA_VERSION = 1
"""The file's `PRAGMA user_version` once `_migrate` has brought it to _SCHEMA (0: a file of before streams)."""
_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS streams (
    id   INTEGER PRIMARY KEY,
    name TEXT    NOT NULL UNIQUE
)""",
    """CREATE TABLE IF NOT EXISTS events (
    position    INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused, even after a rollback
    id          TEXT    NOT NULL UNIQUE,
    stream      TEXT    NOT NULL,
    stream_id   INTEGER NOT NULL,                   -- streams.id of `stream`
    version     INTEGER NOT NULL,
    type        TEXT    NOT NULL,
    data        BLOB    NOT NULL,
    metadata    TEXT    NOT NULL,                   -- JSON object, str -> str
    recorded_at TEXT    NOT NULL,                   -- ISO 8601, UTC
    UNIQUE (stream_id, version)                     -- its index serves read_stream and stream_version
)""",
    """CREATE TABLE IF NOT EXISTS checkpoints (
    name  TEXT    PRIMARY KEY,
    value INTEGER NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS snapshots (                  -- see sluice.eventlog.snapshots
    name     TEXT    PRIMARY KEY,
    position INTEGER NOT NULL,
    schema   TEXT    NOT NULL,
    data     BLOB    NOT NULL
)""",
)
"""Streams are keyed by a small integer in the events' (stream_id, version) index: a batch of appends to
many streams dirties fewer pages of it than with the names, and their number grew with the log."""


class SqliteEventLog(SqlEventLogBase):
    """The EventLog port over SQLite. Thread-safe: one connection behind a lock."""

    OF_STREAM = "stream_id = (SELECT id FROM streams WHERE name = {p})"

    @staticmethod
    def _timestamp(stored: str) -> datetime:
        return datetime.fromisoformat(stored)

    def __init__(
        self,
        path: str | os.PathLike[str] = ":memory:",
        *,
        clock: Clock | None = None,
        poll_interval: float = 0.05,
    ) -> None:
        self._clock = clock or SystemClock()
        super().__init__()
        self._subscribers = Subscribers(self._read_durable_all, poll_interval, lambda: self._closed,
                                       sqlite3.ProgrammingError, self._read_durable_to_head)
        path = os.fspath(path)
        self._conn = _connect(path)
        self._checkpointer = None if _in_memory(path) else WalCheckpointer(path, self._conn)
        self._wal_fsync = None if _in_memory(path) else WalFsync(path)
        self._commits = None if self._wal_fsync is None else GroupCommit(self._wal_fsync)
        if self._wal_fsync is not None and os.path.exists(f"{path}-wal"):
            # a process that deferred commits and was killed before their fsync left them in the OS's cache:
            # durable before this one serves them to anyone
            self._wal_fsync([])
        self._held_back = HeldBack(self._subscribers)
        self._ticket = 0
        self._synchronous = SYNCHRONOUS
        """The connection's synchronous mode now: set before a transaction that needs another (a PRAGMA
        outside a transaction is a read transaction of its own), left as it is after."""

    # -- writing -----------------------------------------------------------------------------

    def append_batch(self, appends: Sequence[StreamAppend], *, checkpoints: Sequence[Checkpoint] = ()) -> list[int]:
        deferring = deferred.current() if self._commits is not None else None
        appended = [append.stream for append in appends if append.events]
        with self._lock:
            with self._begin_immediate(durable=deferring is None) as conn:
                _check_checkpoints(conn, checkpoints)
                recorded_at = self._clock.now().astimezone(timezone.utc).isoformat()
                versions, rows = _append_streams(conn, appends, recorded_at)
                # before any other insert moves last_insert_rowid()
                first = conn.execute("SELECT last_insert_rowid()").fetchone()[0] - len(rows) + 1 if rows else 0
                committed = self._as_recorded(first, rows) if rows and self._subscribers.following() else []
                _upsert_checkpoints(conn, checkpoints)
            if deferring is not None:
                ticket = self._ticket
                if rows:
                    self._held_back.hold(ticket, first, committed, appended)
            elif committed:
                self._subscribers.tail.record(committed)
        if deferring is not None:
            deferring.deferred(self, ticket)
        elif appended:
            self._subscribers.notify(appended)
        return versions

    def _read_durable_to_head(self, after: int, limit: int, prefixes: Sequence[str]) -> tuple[list[RecordedEvent], int]:
        """`read_all_to_head` as subscribers are served: up to the first deferred commit not durable yet."""
        sql, params = self.read_all_query(after, limit, prefixes)
        with self._lock:
            head = self._conn.execute("SELECT COALESCE(MAX(position), 0) FROM events").fetchone()[0]
            bound = self._held_back.bound()
            if bound is not None:
                head = min(head, bound)
            rows: list[Any] = self._conn.execute(sql.format(p=self.PLACEHOLDER), params).fetchall() if head > after else []
        return [self._to_event(row) for row in rows if row[0] <= head], head

    def _read_durable_all(self, after: int, limit: int, prefixes: Sequence[str]) -> list[RecordedEvent]:
        """`read_all` as subscribers are served (see `_read_durable_to_head`)."""
        sql, params = self.read_all_query(after, limit, prefixes)
        with self._lock:
            bound = self._held_back.bound()
            rows = self._conn.execute(sql.format(p=self.PLACEHOLDER), params).fetchall()
        return [self._to_event(row) for row in rows if bound is None or row[0] <= bound]

    def _as_recorded(self, first: int, rows: list[tuple]) -> list[RecordedEvent]:
        """The inserted rows as `read_all` will return them (see the module docstring for their positions)."""
        recorded_at = self._timestamp(rows[0][7])
        return [RecordedEvent(id=id_, stream=stream, version=version, position=position, type=type_, data=data,
                              metadata=json.loads(metadata) if metadata != "{}" else {}, recorded_at=recorded_at)
                for position, (id_, stream, _, version, type_, data, metadata, _) in enumerate(rows, start=first)]

    def close(self) -> None:
        with self._lock:
            checkpointer, self._checkpointer = self._checkpointer, None
        if checkpointer is not None:
            checkpointer.close()
        super().close()
        if self._wal_fsync is not None:
            self._wal_fsync.close()

    def save_checkpoint(self, checkpoint: Checkpoint) -> None:
        with self._transaction() as conn:
            _check_checkpoints(conn, [checkpoint])
            _upsert_checkpoints(conn, [checkpoint])

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock, self._begin_immediate() as conn:
            yield conn

    @contextmanager
    def _begin_immediate(self, *, durable: bool = True) -> Iterator[sqlite3.Connection]:
        """A write transaction; the caller holds `_lock`. Not `durable`: committed without its fsync,
        under the ticket left in `_ticket` (see the module docstring)."""
        synchronous = SYNCHRONOUS if durable else "NORMAL"
        if synchronous != self._synchronous:  # not inside the transaction: SQLite refuses it there
            self._conn.execute(f"PRAGMA synchronous={synchronous}")
            self._synchronous = synchronous
        changes = self._conn.total_changes
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
            self._conn.execute("COMMIT")
        except BaseException:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise
        if self._checkpointer is not None:
            self._checkpointer.committed()
        if self._commits is not None:
            wrote = self._conn.total_changes != changes  # a commit that wrote nothing fsyncs nothing
            self._ticket = self._commits.committed(durable=durable and wrote)
            if durable and wrote:  # its fsync made every earlier commit durable
                self._held_back.release(self._ticket)


def _in_memory(path: str) -> bool:
    return path in ("", ":memory:")


def _connect(path: str) -> sqlite3.Connection:
    in_memory = _in_memory(path)
    if not in_memory:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        private_database(path)
    # isolation_level=None: no implicit transactions, we issue BEGIN IMMEDIATE ourselves.
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0)
    if not in_memory:
        open_wal(conn)  # synchronous=FULL: see sluice.sqlite_wal
    conn.execute("PRAGMA cache_size=-65536")
    try:
        _migrate(conn, path)
    except BaseException:
        conn.close()
        raise
    return conn


def _migrate(conn: sqlite3.Connection, path: str) -> None:
    """Create the schema, or bring a file written before the streams table to it (in one transaction:
    another instance opening the file at the same time waits, then finds it done). A file of a newer
    schema is refused: this release would write it wrong."""
    if _schema_version(conn, path) == SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        if _schema_version(conn, path) != SCHEMA_VERSION:
            columns = {row[1] for row in conn.execute("PRAGMA table_info(events)")}
            before_streams = bool(columns) and "stream_id" not in columns
            if before_streams:
                conn.execute("ALTER TABLE events RENAME TO events_before_streams")
            for statement in _SCHEMA:
                conn.execute(statement)
            if before_streams:
                _copy_with_stream_ids(conn)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _schema_version(conn: sqlite3.Connection, path: str) -> int:
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise EventLogNotMigrated(f"the SQLite event log {path} has schema version {version}, newer than this "
                                  f"release's {SCHEMA_VERSION}: open it with the release that wrote it")
    return version


def _copy_with_stream_ids(conn: sqlite3.Connection) -> None:
    """The events of a file of schema 0 into today's table, each stream numbered in the order it began;
    AUTOINCREMENT's high-water mark goes with them (positions are never reused)."""
    conn.execute("INSERT INTO streams (name) SELECT stream FROM events_before_streams GROUP BY stream"
                 " ORDER BY MIN(position)")
    conn.execute("INSERT INTO events (position, id, stream, stream_id, version, type, data, metadata, recorded_at)"
                 " SELECT e.position, e.id, e.stream, s.id, e.version, e.type, e.data, e.metadata, e.recorded_at"
                 " FROM events_before_streams e JOIN streams s ON s.name = e.stream ORDER BY e.position")
    conn.execute("UPDATE sqlite_sequence SET seq = MAX(seq, (SELECT seq FROM sqlite_sequence"
                 " WHERE name = 'events_before_streams')) WHERE name = 'events'")
    conn.execute("DROP TABLE events_before_streams")


_VERSIONS_CHUNK = 500
_INSERT = ("INSERT INTO events (id, stream, stream_id, version, type, data, metadata, recorded_at)"
           " VALUES (?, ?, ?, ?, ?, ?, ?, ?)")


def _append_streams(conn: sqlite3.Connection, appends: Sequence[StreamAppend],
                    recorded_at: str) -> tuple[list[int], list[tuple]]:
    """Every stream's version checked, then every event inserted by one executemany: a batch of many
    streams costs a few statements, not two per stream. Returns the versions and the rows inserted
    (the columns of _INSERT)."""
    current = _stream_versions(conn, list(dict.fromkeys(append.stream for append in appends)))
    rows, versions = [], []
    for append in appends:
        stream_id, actual = current[append.stream]
        check_expected_version(append.stream, append.expected_version, actual)
        rows += [(event.id, append.stream, stream_id, actual + offset, event.type, bytes(event.data),
                  _metadata(event.metadata), recorded_at) for offset, event in enumerate(append.events, start=1)]
        current[append.stream] = stream_id, actual + len(append.events)
        versions.append(actual + len(append.events))
    before = conn.total_changes
    try:
        conn.executemany(_INSERT, rows)
    except sqlite3.IntegrityError as error:  # the caller rolls the transaction back
        offending = rows[conn.total_changes - before]  # the rows before it were inserted, one change each
        if "events.id" in str(error):
            raise DuplicateEventId(offending[0]) from error
        raise
    return versions, rows


def _stream_versions(conn: sqlite3.Connection, streams: list[str]) -> dict[str, tuple[int, int]]:
    """Each stream's (id, last version), one index probe per stream; streams new to the log are
    numbered here, in order (NO_STREAM: no events yet). `MAX(version) ... IN (...) GROUP BY` walked
    every event of each stream: its cost grew with the stream's length."""
    found = _known_streams(conn, streams)
    new = [name for name in streams if name not in found]
    if new:
        conn.executemany("INSERT INTO streams (name) VALUES (?)", [(name,) for name in new])
        # consecutive ids, as positions are (see the module docstring): the largest plus one, one writer
        first = conn.execute("SELECT last_insert_rowid()").fetchone()[0] - len(new) + 1
        found.update((name, (stream_id, NO_STREAM)) for stream_id, name in enumerate(new, start=first))
    return found


def _known_streams(conn: sqlite3.Connection, names: list[str]) -> dict[str, tuple[int, int]]:
    known: dict[str, tuple[int, int]] = {}
    for start in range(0, len(names), _VERSIONS_CHUNK):
        chunk = names[start:start + _VERSIONS_CHUNK]
        rows = conn.execute(
            f"WITH names(name) AS (VALUES {','.join(['(?)'] * len(chunk))})"
            " SELECT streams.name, streams.id, (SELECT MAX(version) FROM events WHERE stream_id = streams.id)"
            " FROM names JOIN streams ON streams.name = names.name", chunk)
        known.update((name, (stream_id, NO_STREAM if version is None else version))
                     for name, stream_id, version in rows)
    return known


def _metadata(metadata: object) -> str:
    return json.dumps(dict(metadata)) if metadata else "{}"


def _check_checkpoints(conn: sqlite3.Connection, checkpoints: Sequence[Checkpoint]) -> None:
    names = [checkpoint.name for checkpoint in checkpoints if checkpoint.expected is not None]
    if names:
        stored = conn.execute(f"SELECT name, value FROM checkpoints WHERE name IN ({','.join(['?'] * len(names))})",
                              names).fetchall()
        check_expected_checkpoints(checkpoints, dict(stored))


def _upsert_checkpoints(conn: sqlite3.Connection, checkpoints: Sequence[Checkpoint]) -> None:
    conn.executemany(
        "INSERT INTO checkpoints (name, value) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        [(checkpoint.name, checkpoint.value) for checkpoint in checkpoints],
    )
