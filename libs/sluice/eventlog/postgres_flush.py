"""The PostgreSQL event log's commits made durable after the fact (`sluice.eventlog.deferred`).

A deferred append commits with synchronous_commit off: the commit returns once its WAL record is in
the server's WAL buffers, without waiting for the WAL flush. `CommitFlush.sync_to(ticket)` then runs,
on a pooled connection, one transaction that writes a WAL record (a transactional logical-decoding
message: a transaction that wrote nothing, such as `SELECT txid_current()`, commits without a flush)
and commits with the session's synchronous_commit: its commit flushes the WAL up to its own record,
so every commit made before it is durable too. Callers arriving while one runs share the next (a
group commit). Thread-safe.

A commit not flushed yet is lost only if the server crashes, and a crash ends every backend. So the
flush also checks that every backend that made such a commit since the last flush is still the one
that made it (pid and start time in pg_stat_activity): then no crash came between those commits and
the flush. Otherwise, or when the flush fails, DurabilityLost: those commits may be gone, and the
process stops and recovers from the log rather than let out work that may be lost.
"""
from __future__ import annotations

import threading
import weakref
from datetime import datetime
from typing import Any, NamedTuple

import psycopg

from sluice.eventlog.port import EventLogUnavailable
from sluice.eventlog.postgres_pool import PooledConnection
from sluice.eventlog.deferred import DurabilityLost

ASYNCHRONOUS = "SELECT set_config('synchronous_commit', 'off', true)"
"""In the FROM list of a statement run in autocommit mode: that statement's transaction commits without
waiting for the WAL flush."""
_FLUSH = ("SELECT pg_logical_emit_message(true, 'sluice.flush', ''),"
          " (SELECT count(*) FROM pg_stat_activity a"
          "   JOIN unnest(%s::INT[], %s::TIMESTAMPTZ[]) AS b(pid, started) ON a.pid = b.pid AND a.backend_start = b.started)")
_IDENTITY = "SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()"


class Backend(NamedTuple):
    """A server process that made commits not flushed yet: gone (or another of the same pid) after a crash."""
    pid: int
    started: datetime


def flushes_commits(conn: psycopg.Connection[Any]) -> bool:
    """Whether a commit on `conn` waits for the WAL flush (synchronous_commit not off): deferring
    appends gains something only then, and a commit that does not wait can be no more durable later."""
    return conn.execute("SHOW synchronous_commit").fetchone()[0] != "off"


class CommitFlush:
    """Tickets for an event log's commits, and the flush that makes them durable (see the module docstring)."""

    def __init__(self, pool: PooledConnection) -> None:
        self._pool = pool
        self._cond = threading.Condition()
        self._committed = 0
        self._durable = 0
        self._syncing = False
        self._backends: set[Backend] = set()
        """The backends that made asynchronous commits since the last flush started."""
        self._identities: weakref.WeakKeyDictionary[psycopg.Connection[Any], Backend] = weakref.WeakKeyDictionary()
        self.flushes = 0
        """Flushes run so far (tests)."""

    def backend(self, conn: psycopg.Connection[Any]) -> Backend:
        """`conn`'s server process, asked once per connection."""
        identity = self._identities.get(conn)
        if identity is None:
            identity = self._identities[conn] = Backend(conn.info.backend_pid, conn.execute(_IDENTITY).fetchone()[0])
        return identity

    def committed(self, by: Backend, *, synchronous: bool) -> int:
        """A commit returned, made `by` that backend; its ticket. A synchronous one flushed every earlier
        commit too: those are durable if they were made by the same backend (so no crash came between)."""
        with self._cond:
            self._committed += 1
            if not synchronous:
                self._backends.add(by)
            elif self._backends <= {by} and not self._syncing:
                self._durable = self._committed
                self._backends.clear()
            return self._committed

    def is_durable(self, ticket: int) -> bool:
        return ticket <= self._durable

    def sync_to(self, ticket: int) -> int:
        """Block until commit `ticket` is durable; the highest ticket durable then."""
        with self._cond:
            while self._durable < ticket:
                if self._syncing:
                    self._cond.wait()
                    continue
                self._syncing = True
                target, backends = self._committed, list(self._backends)
                self._backends = set()
                self._cond.release()
                try:
                    self._flush(backends)
                except BaseException:
                    self._cond.acquire()
                    self._backends.update(backends)  # a later flush must check them again
                    self._syncing = False
                    self._cond.notify_all()
                    raise
                self._cond.acquire()
                self._syncing = False
                self._cond.notify_all()
                self._durable = max(self._durable, target)
            return self._durable

    def _flush(self, backends: list[Backend]) -> None:
        try:
            with self._pool.connection() as conn:
                alive = conn.execute(_FLUSH, ([b.pid for b in backends], [b.started for b in backends])).fetchone()[1]
        except (psycopg.Error, EventLogUnavailable) as error:
            raise DurabilityLost(f"flushing the PostgreSQL event log's commits failed: {error}") from None
        if alive < len(backends):
            raise DurabilityLost("a PostgreSQL connection that made commits not flushed yet ended before the flush:"
                                 " the server may have restarted and lost them")
        self.flushes += 1
