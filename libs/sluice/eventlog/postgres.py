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
appends made by other instances and processes. The same lock makes this instance's commits fit
for the subscribers' in-memory tail (subscription.Tail): an append's inserts take consecutive
positions (no other writer takes one until it commits, and the identity caches none), every lower
position is committed or rolled back when it commits, and it is recorded after its COMMIT while
this instance's lock is held, so in commit order.
"""
from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass
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
    RecordedEvent,
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
        with self._lock:
            with self._conn.pipeline(), self._conn.transaction(), self._conn.cursor() as cur:
                written = self._write(cur, appends, checkpoints)
            if written.recorded:  # committed, and still in this instance's commit order
                self._subscribers.tail.record(written.recorded)
        if appended := [append.stream for append in appends if append.events]:
            self._subscribers.notify(appended)
        return written.versions

    def _write(self, cur: psycopg.Cursor[Any], appends: Sequence[StreamAppend],
               checkpoints: Sequence[Checkpoint]) -> _Written:
        """The body of an append's transaction, in pipeline mode: BEGIN, the lock and both checks
        in one round trip, every insert and checkpoint in a second, COMMIT in a third, however many
        streams (tests hold the transaction open after this, positions taken, nothing committed).

        Versions are checked before ids: a writer that lost a race derived its event ids from the
        same (stream, version) as the winner's, and must learn that it lost (WrongExpectedVersion)."""
        ids = [event.id for append in appends for event in append.events]
        if len(set(ids)) < len(ids):
            raise DuplicateEventId(next(event_id for event_id in ids if ids.count(event_id) > 1))
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (_APPEND_LOCK,))
        with cur.connection.cursor() as existing:
            cur.execute("SELECT stream, MAX(version) FROM events WHERE stream = ANY(%s) GROUP BY stream",
                        (list({append.stream for append in appends}),))
            existing.execute("SELECT id FROM events WHERE id = ANY(%s)", (ids,))
            current = dict(cur.fetchall())  # under _APPEND_LOCK: no other append moves these before we commit
            taken = {row[0] for row in existing.fetchall()}
        actuals = [current.get(append.stream, NO_STREAM) for append in appends]
        for append, actual in zip(appends, actuals):
            check_expected_version(append.stream, append.expected_version, actual)
        if taken:
            raise DuplicateEventId(next(event_id for event_id in ids if event_id in taken))
        recorded_at = self._clock.now().astimezone(timezone.utc)
        rows = [(event.id, append.stream, actual + offset, event.type, bytes(event.data),
                 json.dumps(dict(event.metadata)), recorded_at)
                for append, actual in zip(appends, actuals) for offset, event in enumerate(append.events, start=1)]
        following = bool(rows) and self._subscribers.following()
        with cur.connection.cursor() as last:
            with cur.connection.pipeline():  # nested in the append's: leaving it sends these and waits for them
                if rows:
                    cur.executemany("INSERT INTO events (id, stream, version, type, data, metadata, recorded_at)"
                                    " VALUES (%s, %s, %s, %s, %s, %s, %s)", rows)
                if following:  # under _APPEND_LOCK the inserts took consecutive positions, ending here
                    last.execute("SELECT currval(pg_get_serial_sequence('events', 'position'))")
                _upsert_checkpoints(cur, checkpoints)
            end = last.fetchone()[0] if following else 0
        versions = [actual + len(append.events) for append, actual in zip(appends, actuals)]
        if not following:
            return _Written(versions, [])
        recorded = [RecordedEvent(id=id_, stream=stream, version=version, position=position, type=type_, data=data,
                                  metadata=json.loads(metadata), recorded_at=recorded_at)
                    for position, (id_, stream, version, type_, data, metadata, _)
                    in enumerate(rows, start=end - len(rows) + 1)]
        return _Written(versions, recorded)

    def save_checkpoint(self, checkpoint: Checkpoint) -> None:
        """One statement, atomic as it is: no transaction block around it."""
        with self._lock, self._conn.cursor() as cur:
            _upsert_checkpoints(cur, [checkpoint])

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Cursor[Any]]:
        with self._lock, self._conn.transaction(), self._conn.cursor() as cur:
            yield cur


@dataclass(frozen=True)
class _Written:
    versions: list[int]
    recorded: list[RecordedEvent]
    """The appended events as `read_all` returns them, when the instance has followers (for their tail)."""


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


def _upsert_checkpoints(cur: psycopg.Cursor[Any], checkpoints: Sequence[Checkpoint]) -> None:
    if checkpoints:
        cur.executemany(
            "INSERT INTO checkpoints (name, value) VALUES (%s, %s)"
            " ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            [(checkpoint.name, checkpoint.value) for checkpoint in checkpoints],
        )
