"""PostgreSQL adapter of the event-log port (psycopg 3) over a connection pool (psycopg_pool).

Connections. Reads take a pooled connection each; appends are serialised by the instance's lock (the
tail below needs them in commit order). A connection lost (server restarted, killed backend, network)
is replaced by the pool; the statement is retried on another for up to `retry_for` seconds, then
EventLogUnavailable is raised (an infrastructure error: the caller's work waits, nothing is refused).
An append whose connection was lost after it was sent has an unknown outcome: it is sent again, and if
that fails on the versions, the ids or a checkpoint, the log is asked whether the first one committed
(its event ids present, or its checkpoints at their new values), which makes the retry idempotent
(the append sent again carries the event ids it was sent with).

Schema. `migrate(dsn)` (`sluice migrate`) creates or updates the tables and `sluice_append` and records
SCHEMA_VERSION; an instance opened with `migrate=False` only checks that version (EventLogNotMigrated
otherwise), so it needs no DDL rights, and a read-only role (SELECT) can read the log.

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

Within `sluice.eventlog.deferred.deferring()` (a consumer's poll that asks for it) an append commits
with synchronous_commit off, and `durable(ticket)` awaits, in a worker thread, one flush that makes it
and every earlier commit durable (`sluice.eventlog.postgres_flush`; nothing is deferred when the
session's synchronous_commit is off already). Until then its events are held back from this instance's
subscribers: the tail gets them once durable, and reads are bounded below the first commit not durable
yet (or in flight), so nothing leaves the process ahead of its durability. Another process reading the
table does see such a commit before its flush, as with any asynchronous commit.
"""
from __future__ import annotations

import json
import logging
from contextlib import contextmanager
from datetime import timezone
from typing import Any, Iterator, Mapping, NamedTuple, Sequence

import psycopg

from sluice.clock import Clock, SystemClock
from sluice.eventlog import deferred
from sluice.eventlog.group_commit import GroupCommit
from sluice.eventlog.postgres_flush import ASYNCHRONOUS, Backend, WalFlush, flushes_commits
from sluice.eventlog.postgres_statistics import FreshStatistics
from sluice.eventlog.postgres_pool import POOL_SIZE, RETRY_FOR, PooledConnection, configure, unavailable
from sluice.eventlog.sql import COLUMNS, SqlEventLogBase
from sluice.eventlog.subscription import HeldBack, Subscribers
from sluice.eventlog.port import (
    ANY_VERSION,
    NO_STREAM,
    Checkpoint,
    CheckpointMoved,
    DuplicateEventId,
    EventLogNotMigrated,
    EventLogUnavailable,
    RecordedEvent,
    StreamAppend,
    WrongExpectedVersion,
)

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
"""The schema `migrate` writes (table sluice_schema); bump it with every change to _SCHEMA."""
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
CREATE TABLE IF NOT EXISTS sluice_schema (              -- one row: the SCHEMA_VERSION migrate wrote
    version INT NOT NULL
);
DELETE FROM sluice_schema;
INSERT INTO sluice_schema (version) VALUES ({version});
"""


ANALYZE_RETRY_FOR = 1.0
"""A young log's ANALYZE (postgres_statistics) waits this long at most for a connection, and as long for the
table's lock: `close` waits for it."""


class PostgresEventLog(SqlEventLogBase):
    """The EventLog port over PostgreSQL. Thread-safe; several instances (processes) may share a database."""

    PLACEHOLDER = "%s"

    def __init__(self, dsn: str, *, clock: Clock | None = None, poll_interval: float = 0.05, migrate: bool = True,
                 retry_for: float = RETRY_FOR, pool_size: int = POOL_SIZE) -> None:
        """`migrate`: create or update the schema first (needs DDL rights); False only checks that it is
        there (EventLogNotMigrated). Unreachable at start: the driver's error, as before."""
        self._clock = clock or SystemClock()
        super().__init__()
        self._subscribers = Subscribers(self._read_durable_all, poll_interval, lambda: self._closed, psycopg.Error,
                                        self._read_durable_to_head)
        with _connect(dsn) as conn:
            if migrate:
                _migrate(conn)
            else:
                _check_schema(conn)
            defers = flushes_commits(conn)
        self._conn = PooledConnection(dsn, pool_size, retry_for)
        self._statistics = FreshStatistics(self._analyze)
        self._wal_flush = WalFlush(self._conn) if defers else None
        self._commits = None if self._wal_flush is None else GroupCommit(self._wal_flush)
        self._held_back = HeldBack(self._subscribers)

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
        rows = self._read(f"SELECT h.head, e.* FROM (SELECT COALESCE(MAX(position), 0) AS head FROM events) h"
                          f" LEFT JOIN LATERAL (SELECT {COLUMNS} FROM events WHERE position > {{p}}{where}"
                          f" ORDER BY position LIMIT {{p}}) e ON true", (after, *params, limit))
        return [self._to_event(row[1:]) for row in rows if row[1] is not None], rows[0][0]

    def read_all(self, after: int = 0, limit: int = 1000, prefixes: Sequence[str] = ()) -> list[RecordedEvent]:
        return [self._to_event(row) for row in self._read(*self.read_all_query(after, limit, prefixes))]

    def _read(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """A read of the log by position, planned for the position it starts from (docs/decisions.md): a
        plan prepared and kept (psycopg prepares a statement run 5 times, PostgreSQL then keeps a generic
        plan) was made for the log as it was, small at first, and kept a sequential scan and a sort as the
        log grew, until statistics were gathered again."""
        return self._conn.execute(sql.format(p=self.PLACEHOLDER), params, prepare=False).fetchall()

    # -- writing -----------------------------------------------------------------------------

    def append_batch(self, appends: Sequence[StreamAppend], *, checkpoints: Sequence[Checkpoint] = ()) -> list[int]:
        for append in appends:
            if append.expected_version < NO_STREAM and append.expected_version != ANY_VERSION:
                raise ValueError(f"invalid expected version {append.expected_version} for stream {append.stream!r}")
        ids = [event.id for append in appends for event in append.events]
        if len(set(ids)) < len(ids):
            raise DuplicateEventId(next(event_id for event_id in ids if ids.count(event_id) > 1))
        deferring = deferred.current() if self._commits is not None else None
        appended = [append.stream for append in appends if append.events]
        with self._lock:
            if deferring is None:
                written = self._append_retrying(appends, checkpoints)
                if self._commits is not None and (ids or checkpoints):  # its commit flushed every earlier one
                    self._held_back.release(self._commits.committed(written.backend, durable=True))
                if written.recorded:  # committed, and still in this instance's commit order
                    self._subscribers.tail.record(written.recorded)
            else:
                with self._held_back.in_flight(ids):
                    written = self._append_retrying(appends, checkpoints)
                    ticket = self._commits.committed(written.backend, durable=False)
                    if written.first:
                        self._held_back.hold(ticket, written.first, written.recorded, appended)
        if deferring is not None:
            deferring.deferred(self, ticket)
        elif appended:
            self._subscribers.notify(appended)
        if written.first:
            self._statistics.appended(written.first + len(ids) - 1)
        return written.versions

    def _analyze(self) -> None:
        def analyze(conn: psycopg.Connection[Any]) -> None:
            with conn.transaction():  # never behind a long lock holder (an anti-wraparound vacuum): `close` waits
                conn.execute(f"SET LOCAL lock_timeout = '{ANALYZE_RETRY_FOR}s'")
                conn.execute("ANALYZE events")
        self._conn.run(analyze, "ANALYZE", retry_for=ANALYZE_RETRY_FOR)

    def close(self) -> None:
        self._statistics.wait()
        super().close()

    def _read_durable_to_head(self, after: int, limit: int, prefixes: Sequence[str]) -> tuple[list[RecordedEvent], int]:
        """`read_all_to_head` as subscribers are served: up to the first deferred commit not durable yet."""
        events, head = self.read_all_to_head(after, limit, prefixes)
        bound = self._held_back.bound(events)
        if bound is None:
            return events, head
        return [event for event in events if event.position <= bound], min(head, max(bound, after))

    def _read_durable_all(self, after: int, limit: int, prefixes: Sequence[str]) -> list[RecordedEvent]:
        """`read_all` as subscribers are served (see `_read_durable_to_head`)."""
        events = self.read_all(after, limit, prefixes)
        bound = self._held_back.bound(events)
        return events if bound is None else [event for event in events if event.position <= bound]

    def _append_retrying(self, appends: Sequence[StreamAppend], checkpoints: Sequence[Checkpoint]) -> _Written:
        """`_write` on a pooled connection, again on another while the connection fails, until `retry_for`.
        Once an attempt failed with its outcome unknown, a refusal of a later one (the versions moved,
        the ids or a checkpoint taken) may be the first attempt's own commit: the log says."""
        unknown = False

        def attempt(conn: psycopg.Connection[Any]) -> _Written:
            nonlocal unknown
            try:
                with self._append_cursor(conn) as cur:
                    written = self._write(cur, appends, checkpoints)
            except (WrongExpectedVersion, DuplicateEventId):
                if unknown and self._committed(conn, appends, checkpoints):
                    log.warning("an append retried after its connection was lost had committed: %s",
                                ", ".join(dict.fromkeys(append.stream for append in appends)) or "checkpoints")
                    written = _Written(self._versions_now(conn, appends), [],  # not for the tail: order unknown
                                       self._first_position(conn, appends))
                else:
                    raise
            except psycopg.Error as error:
                unknown = unknown or unavailable(error)
                raise
            if self._wal_flush is not None:  # a commit not flushed yet is safe while its backend lives
                return written._replace(backend=self._wal_flush.backend(conn))
            return written

        return self._conn.run(attempt, "append")

    @contextmanager
    def _append_cursor(self, conn: psycopg.Connection[Any]) -> Iterator[psycopg.Cursor[Any]]:
        """The cursor for an append's one statement, which commits by itself (the connection is in
        autocommit mode). Tests hold it in a transaction of their own instead."""
        with conn.cursor() as cur:
            yield cur

    @staticmethod
    def _committed(conn: psycopg.Connection[Any], appends: Sequence[StreamAppend],
                   checkpoints: Sequence[Checkpoint]) -> bool:
        """Whether an append with these events (all their ids, in their streams) or, without events,
        these checkpoint values is in the log."""
        expected = {event.id: append.stream for append in appends for event in append.events}
        if expected:
            rows = conn.execute("SELECT id, stream FROM events WHERE id = ANY(%s)", (list(expected),)).fetchall()
            return dict(rows) == expected
        if not checkpoints:
            return False
        stored = dict(conn.execute("SELECT name, value FROM checkpoints WHERE name = ANY(%s)",
                                   ([checkpoint.name for checkpoint in checkpoints],)).fetchall())
        return all(stored.get(checkpoint.name) == checkpoint.value for checkpoint in checkpoints)

    @staticmethod
    def _first_position(conn: psycopg.Connection[Any], appends: Sequence[StreamAppend]) -> int:
        """The first position of a committed append's events (0 without events)."""
        ids = [event.id for append in appends for event in append.events]
        return conn.execute("SELECT COALESCE(MIN(position), 0) FROM events WHERE id = ANY(%s)", (ids,)).fetchone()[0]

    @staticmethod
    def _versions_now(conn: psycopg.Connection[Any], appends: Sequence[StreamAppend]) -> list[int]:
        """Each append's version after a committed append: its last event's, else its stream's now."""
        ids = [append.events[-1].id for append in appends if append.events]
        stored = dict(conn.execute("SELECT id, version FROM events WHERE id = ANY(%s)", (ids,)).fetchall())
        versions = []
        for append in appends:
            if append.events:
                versions.append(stored[append.events[-1].id])
            else:
                row = conn.execute("SELECT COALESCE(MAX(version), %s) FROM events WHERE stream = %s",
                                   (NO_STREAM, append.stream)).fetchone()
                versions.append(row[0])
        return versions

    def _write(self, cur: psycopg.Cursor[Any], appends: Sequence[StreamAppend],
               checkpoints: Sequence[Checkpoint]) -> _Written:
        """One round trip: `sluice_append` (see _SCHEMA) takes the append lock, checks the versions,
        then the ids (a writer that lost a race derived its event ids from the same (stream,
        version) as the winner's, and must learn that it lost: WrongExpectedVersion), inserts the
        events and saves the checkpoints."""
        events = [(index, offset, event) for index, append in enumerate(appends, start=1)
                  for offset, event in enumerate(append.events, start=1)]
        recorded_at = self._clock.now().astimezone(timezone.utc)
        metadata = [_metadata_text(event.metadata) for _, _, event in events]
        data = [bytes(event.data) for _, _, event in events]
        asynchronous = self._commits is not None and deferred.current() is not None
        try:
            cur.execute(_DEFERRED_APPEND_CALL if asynchronous else _APPEND_CALL,
                        ([append.stream for append in appends], [append.expected_version for append in appends],
                         [index for index, _, _ in events], [offset for _, offset, _ in events],
                         [event.id for _, _, event in events], [event.type for _, _, event in events],
                         data, metadata, recorded_at,
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
        if not events:
            return _Written(versions, [], 0)
        first = last_position - len(events) + 1  # under the append lock the inserts took consecutive positions
        if not self._subscribers.following():
            return _Written(versions, [], first)
        recorded = [RecordedEvent(id=event.id, stream=appends[index - 1].stream, version=actuals[index - 1] + offset,
                                  position=position, type=event.type, data=payload,
                                  metadata=dict(event.metadata), recorded_at=recorded_at)
                    for position, (index, offset, event), payload in zip(range(first, last_position + 1), events, data)]
        return _Written(versions, recorded, first)

    def save_checkpoint(self, checkpoint: Checkpoint) -> None:
        """One statement, atomic as it is: no transaction block around it."""
        if checkpoint.expected is not None:
            self.append_batch([], checkpoints=[checkpoint])
            return
        self._conn.execute(_UPSERT_CHECKPOINT, (checkpoint.name, checkpoint.value))

    def ping(self, timeout: float = 1.0) -> None:
        """One cheap round trip on a pooled connection, retried for `timeout` seconds at most (health
        probes); EventLogUnavailable when it fails."""
        self._conn.run(lambda conn: conn.execute("SELECT 1").fetchall(), "ping", retry_for=timeout)

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """On a pooled connection of its own, retried on another when the connection fails: reads
        need not wait for an append (the instance's lock serialises only those)."""
        return self._conn.execute(sql.format(p=self.PLACEHOLDER), params).fetchall()

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Cursor[Any]]:
        """Snapshots' writes: one try (their callers save again later); a lost connection is EventLogUnavailable."""
        try:
            with self._lock, self._conn.connection() as conn, conn.transaction(), conn.cursor() as cur:
                yield cur
        except psycopg.Error as error:
            if unavailable(error):
                raise EventLogUnavailable(f"PostgreSQL unavailable (snapshot): {error}") from error
            raise


class _Written(NamedTuple):
    versions: list[int]
    recorded: list[RecordedEvent]
    """The appended events as `read_all` returns them, when the instance has followers (for their tail)."""
    first: int
    """The first event's position (0 without events)."""
    backend: Backend | None = None
    """The server process that committed it, when deferred appends are flushed (postgres_flush)."""


def _metadata_text(metadata: Mapping[str, str]) -> str:
    """The metadata column's JSON object; most events carry none."""
    return json.dumps(dict(metadata)) if metadata else "{}"


def _connect(dsn: str) -> psycopg.Connection[Any]:
    """One connection of its own (autocommit): the schema's set-up or check at start, `migrate`."""
    conn = psycopg.connect(dsn, autocommit=True)
    try:
        configure(conn)
    except BaseException:
        conn.close()
        raise
    return conn


def migrate(dsn: str) -> int:
    """Create or update the schema (`sluice migrate`; needs CREATE rights); returns SCHEMA_VERSION."""
    with _connect(dsn) as conn:
        _migrate(conn)
    return SCHEMA_VERSION


def _migrate(conn: psycopg.Connection[Any]) -> None:
    with conn.transaction():  # concurrent CREATE TABLE IF NOT EXISTS can race: serialise it
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_APPEND_LOCK,))
        conn.execute(_SCHEMA.replace("{lock}", str(_APPEND_LOCK)).replace("{version}", str(SCHEMA_VERSION)))


def _check_schema(conn: psycopg.Connection[Any]) -> None:
    """EventLogNotMigrated unless `migrate` wrote this code's SCHEMA_VERSION (reads only: no DDL rights needed)."""
    row = conn.execute("SELECT to_regclass('sluice_schema') IS NOT NULL").fetchone()
    version = conn.execute("SELECT MAX(version) FROM sluice_schema").fetchone()[0] if row and row[0] else None
    if version is None or version < SCHEMA_VERSION:
        found = "no Sluice schema" if version is None else f"schema version {version}, this Sluice needs {SCHEMA_VERSION}"
        raise EventLogNotMigrated(f"the PostgreSQL event log is not migrated ({found}): run `sluice migrate`")
    if version > SCHEMA_VERSION:
        raise EventLogNotMigrated(f"the PostgreSQL event log has schema version {version}, newer than this "
                                  f"Sluice's {SCHEMA_VERSION}: upgrade Sluice")


_APPEND_CALL = ("SELECT actuals, last_position FROM sluice_append(%b::TEXT[], %b::BIGINT[], %b::INT[], %b::INT[],"
                " %b::TEXT[], %b::TEXT[], %b::BYTEA[], %b::TEXT[], %b::TIMESTAMPTZ, %b::TEXT[], %b::BIGINT[], %b::BIGINT[])")
"""Binary parameters: psycopg dumps a text array of byte strings through a regex escape per element,
several times the cost of binary parameters (docs/decisions.md). The casts
make the arrays' types the function's, whatever element type psycopg picked (int2 for small ints)."""
_DEFERRED_APPEND_CALL = _APPEND_CALL.replace(" FROM sluice_append(", f" FROM ({ASYNCHRONOUS}) s, sluice_append(")
"""The same, committing without waiting for the WAL flush (a deferred append)."""
_UPSERT_CHECKPOINT = ("INSERT INTO checkpoints (name, value) VALUES (%s, %s)"
                      " ON CONFLICT (name) DO UPDATE SET value = excluded.value")
