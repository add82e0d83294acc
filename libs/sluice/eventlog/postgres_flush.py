"""The PostgreSQL event log's commits made durable after the fact (`sluice.eventlog.deferred`).

A deferred append commits with synchronous_commit off: the commit returns once its WAL record is in
the server's WAL buffers, without waiting for the WAL flush. `durable(ticket)` then has the log's
GroupCommit (sluice.eventlog.group_commit) run `WalFlush`: on a pooled connection, one transaction that
writes a WAL record (a transactional logical-decoding message: a transaction that wrote nothing, such
as `SELECT txid_current()`, commits without a flush) and commits with the session's synchronous_commit:
its commit flushes the WAL up to its own record, so every commit made before it is durable too. Callers
arriving while one runs share the next (a group commit).

A commit not flushed yet is lost only if the server crashes, and a crash ends every backend. So the
flush also checks that every backend that made such a commit since the last flush is still the one
that made it (pid and start time in pg_stat_activity): then no crash came between those commits and
the flush; a synchronous commit vouches for earlier ones only when they were all its own backend's.
Otherwise, or when the flush fails, DurabilityLost: those commits may be gone, and the
process stops and recovers from the log rather than let out work that may be lost.
"""
from __future__ import annotations

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


class WalFlush:
    """The flush of the event log's deferred commits (a GroupCommit's, see the module docstring): it also
    checks that the backends which made them still live."""

    def __init__(self, pool: PooledConnection) -> None:
        self._pool = pool
        self._identities: weakref.WeakKeyDictionary[psycopg.Connection[Any], Backend] = weakref.WeakKeyDictionary()

    def backend(self, conn: psycopg.Connection[Any]) -> Backend:
        """`conn`'s server process, asked once per connection."""
        identity = self._identities.get(conn)
        if identity is None:
            identity = self._identities[conn] = Backend(conn.info.backend_pid, conn.execute(_IDENTITY).fetchone()[0])
        return identity

    def __call__(self, backends: list[Backend]) -> None:
        """Flush the WAL; DurabilityLost unless every one of `backends` lived until then."""
        try:
            with self._pool.connection() as conn:
                alive = conn.execute(_FLUSH, ([b.pid for b in backends], [b.started for b in backends])).fetchone()[1]
        except (psycopg.Error, EventLogUnavailable) as error:
            raise DurabilityLost(f"flushing the PostgreSQL event log's commits failed: {error}") from None
        if alive < len(backends):
            raise DurabilityLost("a PostgreSQL connection that made commits not flushed yet ended before the flush:"
                                 " the server may have restarted and lost them")
