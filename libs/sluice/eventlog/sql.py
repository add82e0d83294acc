"""What the SQL adapters share: the read side, subscriptions, deferred commits made durable, and
closing. They differ in how they write, in their placeholder style and in how a stored timestamp comes back."""
from __future__ import annotations

import asyncio
import json
import threading
from datetime import datetime, timezone
from typing import Any, AsyncIterator, Iterable, Sequence

from sluice.eventlog.group_commit import GroupCommit
from sluice.eventlog.port import (NO_STREAM, Checkpoint, NewEvent, RecordedEvent, StreamAppend, head_then_read,
                                 stream_prefixes)
from sluice.eventlog.snapshots import Snapshot
from sluice.eventlog.subscription import HeldBack, Subscribers

COLUMNS = "position, id, stream, version, type, data, metadata, recorded_at"


class SqlEventLogBase:
    """Subclasses set `_conn`, `_subscribers`, `_commits` and `_held_back` in their constructor and
    `PLACEHOLDER` ("?" or "%s"). Their appends hold `_lock`."""

    PLACEHOLDER = "?"
    OF_STREAM = "stream = {p}"
    """The condition on events of one stream, by its name (read_stream, stream_version)."""
    _conn: Any
    _subscribers: Subscribers
    _commits: GroupCommit[Any] | None
    """Makes deferred commits durable; None: the log never defers."""
    _held_back: HeldBack

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._closed = False
        self._last_time: tuple[Any, datetime | None] = (None, None)

    def append(self, stream: str, events: Sequence[NewEvent], expected_version: int, *,
               checkpoints: Sequence[Checkpoint] = ()) -> int:
        return self.append_batch([StreamAppend(stream, events, expected_version)], checkpoints=checkpoints)[0]

    def append_batch(self, appends: Sequence[StreamAppend], *, checkpoints: Sequence[Checkpoint] = ()) -> list[int]:
        raise NotImplementedError

    def read_stream(self, stream: str, from_version: int = 0, limit: int | None = None) -> list[RecordedEvent]:
        query = f"SELECT {COLUMNS} FROM events WHERE {self.OF_STREAM} AND version >= {{p}} ORDER BY version"
        if limit is None:
            rows = self._query(query, (stream, from_version))
        else:
            rows = self._query(query + " LIMIT {p}", (stream, from_version, limit))
        return [self._to_event(row) for row in rows]

    def stream_version(self, stream: str) -> int:
        return self._query(f"SELECT COALESCE(MAX(version), {{p}}) FROM events WHERE {self.OF_STREAM}",
                           (NO_STREAM, stream))[0][0]

    def read_all(self, after: int = 0, limit: int = 1000, prefixes: Sequence[str] = ()) -> list[RecordedEvent]:
        # Gap-free as it is: every adapter makes positions visible in commit order (see its docstring).
        # Filtered in SQL along the position index: skipped rows are never fetched nor decoded.
        return [self._to_event(row) for row in self._query(*self.read_all_query(after, limit, prefixes))]

    def read_all_to_head(self, after: int = 0, limit: int = 1000,
                         prefixes: Sequence[str] = ()) -> tuple[list[RecordedEvent], int]:
        return head_then_read(self, after, limit, prefixes)

    def stream_versions(self, after: int = 0, prefixes: Sequence[str] = ()) -> dict[str, int]:
        where, params = self._prefix_condition(prefixes)
        return dict(self._query(f"SELECT stream, MAX(version) FROM events WHERE position > {{p}}{where} GROUP BY stream",
                                (after, *params)))

    def read_all_query(self, after: int, limit: int, prefixes: Sequence[str]) -> tuple[str, tuple[Any, ...]]:
        """read_all's SQL ({p} for placeholders) and parameters (tests check its query plan)."""
        where, params = self._prefix_condition(prefixes)
        return (f"SELECT {COLUMNS} FROM events WHERE position > {{p}}{where} ORDER BY position LIMIT {{p}}",
                (after, *params, limit))

    def _prefix_condition(self, prefixes: Sequence[str]) -> tuple[str, tuple[str, ...]]:
        conditions = [self._stream_starts_with(prefix) for prefix in stream_prefixes(prefixes)]
        where = f" AND ({' OR '.join(sql for sql, _ in conditions)})" if conditions else ""
        return where, tuple(param for _, param in conditions)

    @staticmethod
    def _stream_starts_with(prefix: str) -> tuple[str, str]:
        """A condition on `stream` and its parameter; the read scans the position index and checks it."""
        return f"substr(stream, 1, {len(prefix)}) = {{p}}", prefix

    def head_position(self) -> int:
        return self._query("SELECT COALESCE(MAX(position), 0) FROM events")[0][0]

    def read_checkpoint(self, name: str) -> int | None:
        rows = self._query("SELECT value FROM checkpoints WHERE name = {p}", (name,))
        return rows[0][0] if rows else None

    def read_checkpoints(self, names: Iterable[str]) -> dict[str, int]:
        names = list(dict.fromkeys(names))
        if not names:
            return {}
        placeholders = ", ".join(["{p}"] * len(names))
        return dict(self._query(f"SELECT name, value FROM checkpoints WHERE name IN ({placeholders})", names))

    # -- snapshots (sluice.eventlog.snapshots): one row per name, in the same database as the log --

    def save_snapshot(self, snapshot: Snapshot) -> None:
        with self._transaction() as conn:
            conn.execute(
                "INSERT INTO snapshots (name, position, schema, data) VALUES ({p}, {p}, {p}, {p})"
                " ON CONFLICT (name) DO UPDATE SET position = excluded.position, schema = excluded.schema,"
                " data = excluded.data".format(p=self.PLACEHOLDER),
                (snapshot.name, snapshot.position, snapshot.schema, bytes(snapshot.data)))

    def read_snapshot(self, name: str) -> Snapshot | None:
        rows = self._query("SELECT position, schema, data FROM snapshots WHERE name = {p}", (name,))
        return Snapshot(name, rows[0][0], rows[0][1], bytes(rows[0][2])) if rows else None

    def delete_snapshot(self, name: str) -> bool:
        with self._transaction() as conn:
            deleted = conn.execute("DELETE FROM snapshots WHERE name = {p}".format(p=self.PLACEHOLDER), (name,))
            return deleted.rowcount > 0

    def _transaction(self) -> Any:
        raise NotImplementedError

    async def durable(self, ticket: int) -> None:
        """Until the deferred append that got `ticket` (and every commit before it) is durable; then its
        events go to the subscribers. DurabilityLost when that cannot be known."""
        if self._commits is not None and not self._commits.is_durable(ticket):
            await asyncio.to_thread(self._sync_to, ticket)

    def _sync_to(self, ticket: int) -> None:
        durable = self._commits.sync_to(ticket)
        with self._lock:
            self._held_back.release(durable)

    @property
    def durability_flushes(self) -> int:
        """Group flushes (fsyncs of the WAL, PostgreSQL WAL flushes) run so far for deferred commits."""
        return 0 if self._commits is None else self._commits.flushes

    @property
    def commits_held_back(self) -> int:
        """Deferred commits not known durable yet, whose events subscribers are not served yet."""
        return len(self._held_back)

    def subscribe(self, after: int = 0, prefixes: Sequence[str] = ()) -> AsyncIterator[RecordedEvent]:
        return self._subscribers.follow(after, prefixes)

    def subscribe_batches(self, after: int = 0, prefixes: Sequence[str] = ()) -> AsyncIterator[list[RecordedEvent]]:
        return self._subscribers.follow_batches(after, prefixes)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._conn.close()
        self._subscribers.tail.clear()
        self._subscribers.notify()

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._conn.execute(sql.format(p=self.PLACEHOLDER), params).fetchall()

    @staticmethod
    def _timestamp(stored: Any) -> datetime:
        return stored.astimezone(timezone.utc)

    def _to_event(self, row: tuple[Any, ...]) -> RecordedEvent:
        position, id_, stream, version, type_, data, metadata, recorded_at = row
        last = self._last_time  # (stored, converted): one reference, read and replaced whole (threads)
        if last[0] != recorded_at:  # the events of one append share their time
            last = self._last_time = (recorded_at, self._timestamp(recorded_at))
        return RecordedEvent(id_, stream, version, position, type_, bytes(data),
                             json.loads(metadata) if metadata != "{}" else {},  # most have none
                             last[1])
