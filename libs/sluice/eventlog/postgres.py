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
streams, are serialised (one round trip chain per append); reads never wait.

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
from sluice.eventlog.sql import COLUMNS, SqlEventLogBase
from sluice.eventlog.subscription import Subscribers
from sluice.eventlog.port import (
    ANY_VERSION,
    NO_STREAM,
    Checkpoint,
    CheckpointMoved,
    DuplicateEventId,
    RecordedEvent,
    StreamAppend,
    WrongExpectedVersion,
)

_APPEND_LOCK = int.from_bytes(b"sluiceEL", "big")
"""The advisory lock key every append (and the schema set-up) holds until its transaction ends."""
_WRONG_EXPECTED_VERSION, _DUPLICATE_EVENT_ID, _CHECKPOINT_MOVED = "SL001", "SL002", "SL003"
"""SQLSTATEs sluice_append raises (message: the stream, the id or the checkpoint; detail: "expected actual")."""

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
DROP FUNCTION IF EXISTS sluice_append(TEXT[], BIGINT[], INT[], INT[], TEXT[], TEXT[], BYTEA[], TEXT[], TIMESTAMPTZ,
                                      TEXT[], BIGINT[]);  -- before checkpoints had expected values
CREATE OR REPLACE FUNCTION sluice_append(
    p_streams TEXT[], p_expected BIGINT[],              -- one per stream append
    p_event_append INT[], p_event_offset INT[],         -- one per event: its append (1-based), its place in it
    p_ids TEXT[], p_types TEXT[], p_data BYTEA[], p_metadata TEXT[], p_recorded_at TIMESTAMPTZ,
    p_checkpoint_names TEXT[], p_checkpoint_values BIGINT[], p_checkpoint_expected BIGINT[]  -- NULL: unchecked
) RETURNS TABLE (actuals BIGINT[], last_position BIGINT) LANGUAGE plpgsql AS $$
DECLARE
    current BIGINT[];
    taken TEXT;
    moved RECORD;
BEGIN
    PERFORM pg_advisory_xact_lock({lock});
    SELECT c.name, c.expected, COALESCE(k.value, 0) AS actual INTO moved
      FROM unnest(p_checkpoint_names, p_checkpoint_expected) AS c(name, expected)
      LEFT JOIN checkpoints k ON k.name = c.name
     WHERE c.expected IS NOT NULL AND c.expected <> COALESCE(k.value, 0) LIMIT 1;
    IF moved.name IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SL003', MESSAGE = moved.name, DETAIL = moved.expected || ' ' || moved.actual;
    END IF;
    SELECT array_agg(COALESCE((SELECT e.version FROM events e WHERE e.stream = a.stream  -- the index's last entry,
                                ORDER BY e.version DESC LIMIT 1), -1) ORDER BY a.ord)   -- however long the stream
      INTO current FROM unnest(p_streams) WITH ORDINALITY AS a(stream, ord);
    FOR i IN 1 .. COALESCE(array_length(p_streams, 1), 0) LOOP
        IF p_expected[i] <> -2 AND p_expected[i] <> current[i] THEN  -- -2: ANY_VERSION
            RAISE EXCEPTION USING ERRCODE = 'SL001', MESSAGE = p_streams[i], DETAIL = p_expected[i] || ' ' || current[i];
        END IF;
    END LOOP;
    SELECT e.id INTO taken FROM events e WHERE e.id = ANY(p_ids) LIMIT 1;
    IF taken IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SL002', MESSAGE = taken;
    END IF;
    INSERT INTO events (id, stream, version, type, data, metadata, recorded_at)
    SELECT n.id, p_streams[n.app], current[n.app] + n.off, n.type, n.data, n.meta, p_recorded_at
      FROM unnest(p_event_append, p_event_offset, p_ids, p_types, p_data, p_metadata)
           WITH ORDINALITY AS n(app, off, id, type, data, meta, ord)
     ORDER BY n.ord;
    INSERT INTO checkpoints (name, value)
    SELECT c.name, c.value FROM unnest(p_checkpoint_names, p_checkpoint_values) AS c(name, value)
        ON CONFLICT (name) DO UPDATE SET value = excluded.value;
    RETURN QUERY SELECT current, CASE WHEN COALESCE(array_length(p_ids, 1), 0) > 0
                                      THEN currval(pg_get_serial_sequence('events', 'position')) END;
END
$$;
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
                                       self.read_all_to_head)
        self._conn = _connect(dsn)

    @staticmethod
    def _stream_starts_with(prefix: str) -> tuple[str, str]:
        """LIKE rather than substr(): the planner estimates how many rows a LIKE prefix matches from
        the column's statistics (substr() = x it guesses at 0.5%, and then prefers a sequential scan
        and a sort to walking the position index until `limit` rows match)."""
        escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        return "stream LIKE {p}", escaped + "%"

    def read_all_to_head(self, after: int = 0, limit: int = 1000,
                         prefixes: Sequence[str] = ()) -> tuple[list[RecordedEvent], int]:
        """One statement, so one snapshot: the head and the events up to it (a row with the head
        alone when none match)."""
        where, params = self._prefix_condition(prefixes)
        rows = self._query(f"SELECT h.head, e.* FROM (SELECT COALESCE(MAX(position), 0) AS head FROM events) h"
                           f" LEFT JOIN LATERAL (SELECT {COLUMNS} FROM events WHERE position > {{p}}{where}"
                           f" ORDER BY position LIMIT {{p}}) e ON true", (after, *params, limit))
        return [self._to_event(row[1:]) for row in rows if row[1] is not None], rows[0][0]

    # -- writing -----------------------------------------------------------------------------

    def append_batch(self, appends: Sequence[StreamAppend], *, checkpoints: Sequence[Checkpoint] = ()) -> list[int]:
        for append in appends:
            if append.expected_version < NO_STREAM and append.expected_version != ANY_VERSION:
                raise ValueError(f"invalid expected version {append.expected_version} for stream {append.stream!r}")
        ids = [event.id for append in appends for event in append.events]
        if len(set(ids)) < len(ids):
            raise DuplicateEventId(next(event_id for event_id in ids if ids.count(event_id) > 1))
        with self._lock:
            with self._append_cursor() as cur:
                written = self._write(cur, appends, checkpoints)
            if written.recorded:  # committed, and still in this instance's commit order
                self._subscribers.tail.record(written.recorded)
        if appended := [append.stream for append in appends if append.events]:
            self._subscribers.notify(appended)
        return written.versions

    @contextmanager
    def _append_cursor(self) -> Iterator[psycopg.Cursor[Any]]:
        """The cursor for an append's one statement, which commits by itself (the connection is in
        autocommit mode). Tests hold it in a transaction of their own instead."""
        with self._conn.cursor() as cur:
            yield cur

    def _write(self, cur: psycopg.Cursor[Any], appends: Sequence[StreamAppend],
               checkpoints: Sequence[Checkpoint]) -> _Written:
        """One round trip: `sluice_append` (see _SCHEMA) takes the append lock, checks the versions,
        then the ids (a writer that lost a race derived its event ids from the same (stream,
        version) as the winner's, and must learn that it lost: WrongExpectedVersion), inserts the
        events and saves the checkpoints."""
        events = [(index, offset, event) for index, append in enumerate(appends, start=1)
                  for offset, event in enumerate(append.events, start=1)]
        recorded_at = self._clock.now().astimezone(timezone.utc)
        metadata = [json.dumps(dict(event.metadata)) for _, _, event in events]
        try:
            cur.execute(_APPEND_CALL,
                        ([append.stream for append in appends], [append.expected_version for append in appends],
                         [index for index, _, _ in events], [offset for _, offset, _ in events],
                         [event.id for _, _, event in events], [event.type for _, _, event in events],
                         [bytes(event.data) for _, _, event in events], metadata, recorded_at,
                         [checkpoint.name for checkpoint in checkpoints],
                         [checkpoint.value for checkpoint in checkpoints],
                         [checkpoint.expected for checkpoint in checkpoints]))
            actuals, last_position = cur.fetchone()
        except psycopg.Error as error:
            if error.sqlstate == _WRONG_EXPECTED_VERSION:
                expected, actual = map(int, error.diag.message_detail.split())
                raise WrongExpectedVersion(error.diag.message_primary, expected, actual) from None
            if error.sqlstate == _DUPLICATE_EVENT_ID:
                raise DuplicateEventId(error.diag.message_primary) from None
            if error.sqlstate == _CHECKPOINT_MOVED:
                expected, actual = map(int, error.diag.message_detail.split())
                raise CheckpointMoved(error.diag.message_primary, expected, actual) from None
            raise
        actuals = actuals or []
        versions = [actual + len(append.events) for append, actual in zip(appends, actuals)]
        if not events or not self._subscribers.following():
            return _Written(versions, [])
        first = last_position - len(events) + 1  # under the append lock the inserts took consecutive positions
        recorded = [RecordedEvent(id=event.id, stream=appends[index - 1].stream, version=actuals[index - 1] + offset,
                                  position=position, type=event.type, data=bytes(event.data),
                                  metadata=json.loads(meta), recorded_at=recorded_at)
                    for position, (index, offset, event), meta in zip(range(first, last_position + 1), events, metadata)]
        return _Written(versions, recorded)

    def save_checkpoint(self, checkpoint: Checkpoint) -> None:
        """One statement, atomic as it is: no transaction block around it."""
        if checkpoint.expected is not None:
            self.append_batch([], checkpoints=[checkpoint])
            return
        with self._lock:
            self._conn.execute(_UPSERT_CHECKPOINT, (checkpoint.name, checkpoint.value))

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
            conn.execute(_SCHEMA.replace("{lock}", str(_APPEND_LOCK)))
    except BaseException:
        conn.close()
        raise
    return conn


_APPEND_CALL = ("SELECT actuals, last_position FROM sluice_append(%b::TEXT[], %b::BIGINT[], %b::INT[], %b::INT[],"
                " %b::TEXT[], %b::TEXT[], %b::BYTEA[], %b::TEXT[], %b::TIMESTAMPTZ, %b::TEXT[], %b::BIGINT[], %b::BIGINT[])")
"""Binary parameters: psycopg dumps a text array of byte strings through a regex escape per element,
several times the cost of binary parameters (docs/decisions.md). The casts
make the arrays' types the function's, whatever element type psycopg picked (int2 for small ints)."""
_UPSERT_CHECKPOINT = ("INSERT INTO checkpoints (name, value) VALUES (%s, %s)"
                      " ON CONFLICT (name) DO UPDATE SET value = excluded.value")
