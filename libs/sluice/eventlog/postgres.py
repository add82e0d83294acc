"""PostgreSQL adapter of the event-log port (psycopg 3): one connection per instance, behind a lock.

Positions and the late-commit problem. A position comes from an identity sequence, which hands
out values BEFORE commit and never waits for anyone: with two concurrent writers, A can take
position 11, B position 12, and B commit first. A reader that then sees 12 and moves its cursor
past it would skip 11 forever once A commits. `read_all(after)` must never do that.

The technique here: every append takes ONE transaction-scoped advisory lock (`_APPEND_LOCK`)
before it takes a position, and holds it until its transaction ends. PostgreSQL makes a commit
visible to new snapshots before it releases that transaction's locks, so the next writer only
gets its positions after the previous writer's events are visible (or rolled back). Positions
are therefore handed out in commit order, a reader's snapshot always holds a gap-free prefix of
the committed log (gaps only where a transaction rolled back, and those never fill), and the
plain `WHERE position > after` is correct. Appends run at READ COMMITTED, so the version check
after the lock sees every earlier append; UNIQUE (stream, version) backs it up.

Why not the transaction-id horizon (store pg_current_xact_id() per row, return only rows whose
xid < pg_snapshot_xmin(pg_current_snapshot()))? Transaction ids and positions are not handed
out in the same order: a transaction holding an OLDER xid can take a LATER position, commit, and
pass the horizon while a younger transaction still holds the earlier position. That technique
is only gap-free when readers order and resume by (xid, position), which the port's single
integer position cursor cannot express. The price of the lock is that appends, across all
streams, are serialised (one round trip chain per append, ~1 ms locally); reads never wait.

Subscribers are woken at once by appends through this instance and poll (poll_interval) for
appends made by other instances and processes.
"""
from __future__ import annotations

import json
from contextlib import contextmanager
from datetime import timezone
from typing import Any, Iterator, Sequence

import psycopg
from psycopg import IsolationLevel

from sluice.clock import Clock, SystemClock
from sluice.eventlog.sql import SqlEventLogBase
from sluice.eventlog.subscription import Subscribers
from sluice.eventlog.port import (
    NO_STREAM,
    Checkpoint,
    DuplicateEventId,
    StreamAppend,
    check_expected_version,
)

_APPEND_LOCK = int.from_bytes(b"sluiceEL", "big")
"""The advisory lock key every append (and the schema set-up) holds until its transaction ends."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    -- taken under _APPEND_LOCK; CACHE 1 because values cached per session would break commit order
    position    BIGINT      GENERATED ALWAYS AS IDENTITY (CACHE 1) PRIMARY KEY,
    id          TEXT        NOT NULL CONSTRAINT events_id_unique UNIQUE,
    stream      TEXT        NOT NULL,
    version     BIGINT      NOT NULL,
    type        TEXT        NOT NULL,
    data        BYTEA       NOT NULL,
    metadata    TEXT        NOT NULL,                   -- JSON object, str -> str
    recorded_at TIMESTAMPTZ NOT NULL,
    CONSTRAINT events_stream_version_unique UNIQUE (stream, version)  -- serves read_stream, stream_version
);
CREATE TABLE IF NOT EXISTS checkpoints (
    name  TEXT   PRIMARY KEY,
    value BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS snapshots (                  -- see sluice.eventlog.snapshots
    name     TEXT   PRIMARY KEY,
    position BIGINT NOT NULL,
    schema   TEXT   NOT NULL,
    data     BYTEA  NOT NULL
);
"""
class PostgresEventLog(SqlEventLogBase):
    """The EventLog port over PostgreSQL. Thread-safe; several instances (processes) may share a database."""

    PLACEHOLDER = "%s"

    def __init__(self, dsn: str, *, clock: Clock | None = None, poll_interval: float = 0.05) -> None:
        self._clock = clock or SystemClock()
        super().__init__()
        self._subscribers = Subscribers(self.read_all, poll_interval, lambda: self._closed, psycopg.Error,
                                       self.head_position)
        self._conn = _connect(dsn)

    @staticmethod
    def _stream_starts_with(prefix: str) -> tuple[str, str]:
        """LIKE rather than substr(): the planner estimates how many rows a LIKE prefix matches from
        the column's statistics (substr() = x it guesses at 0.5%, and then prefers a sequential scan
        and a sort to walking the position index until `limit` rows match)."""
        escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        return "stream LIKE {p}", escaped + "%"

    # -- writing -----------------------------------------------------------------------------

    def append_batch(self, appends: Sequence[StreamAppend], *, checkpoints: Sequence[Checkpoint] = ()) -> list[int]:
        with self._transaction() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (_APPEND_LOCK,))
            versions = self._write(cur, appends, checkpoints)
        if appended := [append.stream for append in appends if append.events]:
            self._subscribers.notify(appended)
        return versions

    def _write(self, cur: psycopg.Cursor[Any], appends: Sequence[StreamAppend],
               checkpoints: Sequence[Checkpoint]) -> list[int]:
        """The body of an append's transaction, under _APPEND_LOCK (tests hold the transaction open here).

        Versions are checked before ids: a writer that lost a race derived its event ids from the
        same (stream, version) as the winner's, and must learn that it lost (WrongExpectedVersion)."""
        actuals = []
        for append in appends:
            cur.execute("SELECT COALESCE(MAX(version), %s) FROM events WHERE stream = %s", (NO_STREAM, append.stream))
            actual = cur.fetchone()[0]
            check_expected_version(append.stream, append.expected_version, actual)
            actuals.append(actual)
        _check_unique_ids(cur, [event.id for append in appends for event in append.events])
        recorded_at = self._clock.now().astimezone(timezone.utc)
        versions: list[int] = []
        for append, actual in zip(appends, actuals):
            if append.events:
                cur.executemany(
                    "INSERT INTO events (id, stream, version, type, data, metadata, recorded_at)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s)",
                    [(event.id, append.stream, actual + offset, event.type, bytes(event.data),
                      json.dumps(dict(event.metadata)), recorded_at)
                     for offset, event in enumerate(append.events, start=1)],
                )
            versions.append(actual + len(append.events))
        _upsert_checkpoints(cur, checkpoints)
        return versions

    def save_checkpoint(self, checkpoint: Checkpoint) -> None:
        with self._transaction() as cur:
            _upsert_checkpoints(cur, [checkpoint])

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Cursor[Any]]:
        with self._lock, self._conn.transaction(), self._conn.cursor() as cur:
            yield cur


def _connect(dsn: str) -> psycopg.Connection[Any]:
    # autocommit: single reads need no transaction; writes open one with conn.transaction().
    conn = psycopg.connect(dsn, autocommit=True)
    try:
        # READ COMMITTED whatever the server's default: each statement of an append after the
        # lock must see the appends committed before it (a snapshot from before the lock would not).
        conn.isolation_level = IsolationLevel.READ_COMMITTED
        conn.execute("SET TIME ZONE 'UTC'")  # recorded_at comes back as UTC
        with conn.transaction():  # concurrent CREATE TABLE IF NOT EXISTS can race: serialise it
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_APPEND_LOCK,))
            conn.execute(_SCHEMA)
    except BaseException:
        conn.close()
        raise
    return conn


def _check_unique_ids(cur: psycopg.Cursor[Any], ids: list[str]) -> None:
    seen: set[str] = set()
    for event_id in ids:
        if event_id in seen:
            raise DuplicateEventId(event_id)
        seen.add(event_id)
    if ids:  # under _APPEND_LOCK no other append can insert one of these ids before we commit
        cur.execute("SELECT id FROM events WHERE id = ANY(%s)", (ids,))
        existing = {row[0] for row in cur.fetchall()}
        if existing:
            raise DuplicateEventId(next(event_id for event_id in ids if event_id in existing))


def _upsert_checkpoints(cur: psycopg.Cursor[Any], checkpoints: Sequence[Checkpoint]) -> None:
    if checkpoints:
        cur.executemany(
            "INSERT INTO checkpoints (name, value) VALUES (%s, %s)"
            " ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            [(checkpoint.name, checkpoint.value) for checkpoint in checkpoints],
        )
