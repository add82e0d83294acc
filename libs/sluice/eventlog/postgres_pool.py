"""The PostgreSQL event log's connections: a psycopg_pool pool that replaces lost connections, and the
rule telling a failure of the server or the connection (retry, on another connection, later) from a
failure of the statement (raise)."""
from __future__ import annotations

import asyncio
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence, TypeVar

import psycopg
from psycopg import IsolationLevel
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolClosed

from sluice.eventlog.port import EventLogUnavailable

T = TypeVar("T")

RETRY_FOR = 5.0
"""Seconds a statement is retried on fresh connections before EventLogUnavailable."""
ON_LOOP_RETRY_FOR = 0.3
"""The same on an event loop's thread (a relay saving its position): longer would stall every task."""
POOL_SIZE = 4
"""Connections at most per instance (reads run side by side; appends take one at a time)."""
RECONNECT_TIMEOUT = 10.0
"""psycopg_pool's reconnect attempt backs off exponentially (1, 2, 4... s) and gives up after this; the
next request starts a fresh attempt. Short, so that the pool's delay after a long outage stays short."""


class PooledConnection:
    """The adapter's connections: a psycopg_pool pool, each statement on a connection it lends, retried
    on another while the connection or the server fails (`run`). What the SQL base class and tests
    call `_conn`: `execute` returns the rows already fetched, so the connection goes back at once."""

    def __init__(self, dsn: str, size: int, retry_for: float) -> None:
        self.retry_for = retry_for
        self.pool = ConnectionPool(dsn, min_size=1, max_size=max(1, size), open=False, configure=configure,
                                   kwargs={"autocommit": True, **network_timeouts(dsn)}, timeout=RETRY_FOR,
                                   reconnect_timeout=RECONNECT_TIMEOUT, name="sluice-eventlog", num_workers=1)
        self.pool.open(wait=False)
        self._hot: psycopg.Connection[Any] | None = None
        self._hot_lock = threading.Lock()

    def execute(self, sql: str, params: Sequence[Any] | None = None, *, prepare: bool | None = None) -> _Rows:
        """`prepare`: psycopg's (None: prepared once run often enough; False: planned at each run)."""
        def statement(conn: psycopg.Connection[Any]) -> _Rows:
            cur = conn.execute(sql, params, prepare=prepare)
            return _Rows(cur.fetchall() if cur.description is not None else [], cur.rowcount)

        return self.run(statement, sql)

    def run(self, work: Callable[[psycopg.Connection[Any]], T], what: str, retry_for: float | None = None) -> T:
        """`work` on a pooled connection; on a connection or server failure (see `unavailable`) again on
        another, backing off, until `retry_for` seconds (default: the pool's, ON_LOOP_RETRY_FOR on an
        event loop's thread) have passed: then EventLogUnavailable. `work` must be safe to run again
        (the append makes itself so)."""
        if self._hot is not None and self._hot_lock.acquire(blocking=False):  # the common case, cheapest
            try:
                if (conn := self._hot) is not None:
                    try:
                        return work(conn)
                    except BaseException as error:
                        self._hot = None
                        self.pool.putconn(conn)
                        if not (isinstance(error, psycopg.Error) and unavailable(error)):
                            raise
            finally:
                self._hot_lock.release()
        return self._run(work, what, retry_for)

    def _run(self, work: Callable[[psycopg.Connection[Any]], T], what: str, retry_for: float | None) -> T:
        if retry_for is None:  # an event loop's thread must not wait long: its callers handle the error
            retry_for = ON_LOOP_RETRY_FOR if asyncio._get_running_loop() is not None else self.retry_for
        deadline = time.monotonic() + retry_for
        delay = 0.05
        while True:
            try:
                with self.connection(max(0.1, deadline - time.monotonic())) as conn:
                    return work(conn)
            except EventLogUnavailable as error:
                failure: BaseException = error.__cause__ or error
            except psycopg.Error as error:
                if not unavailable(error):
                    raise
                failure = error
            if isinstance(failure, PoolClosed):
                raise EventLogUnavailable(f"the event log is closed ({_verb(what)})") from failure
            if time.monotonic() + delay >= deadline:
                raise EventLogUnavailable(f"PostgreSQL unavailable ({_verb(what)}): {failure}") from failure
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    @contextmanager
    def connection(self, timeout: float | None = None) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection; failing to get one (the server down, the pool closed) is EventLogUnavailable.
        The first caller not overlapping another keeps using one connection held out of the pool (the
        pool's bookkeeping cost a read ~40 us of CPU); after any error it goes back to the pool, which
        drops a broken one and connects anew. Callers overlapping it borrow from the pool."""
        if not self._hot_lock.acquire(blocking=False):
            conn = self._borrow(timeout)
            try:
                yield conn
            finally:
                self.pool.putconn(conn)
            return
        try:
            if self._hot is None:
                self._hot = self._borrow(timeout)
            try:
                yield self._hot
            except BaseException:
                conn, self._hot = self._hot, None
                self.pool.putconn(conn)
                raise
        finally:
            self._hot_lock.release()

    def _borrow(self, timeout: float | None) -> psycopg.Connection[Any]:
        try:
            return self.pool.getconn(timeout if timeout is not None else RETRY_FOR)
        except psycopg.Error as error:
            raise EventLogUnavailable(f"no connection to PostgreSQL: {error}") from error

    def close(self) -> None:
        with self._hot_lock:
            conn, self._hot = self._hot, None
            if conn is not None:
                self.pool.putconn(conn)
        self.pool.close(timeout=5.0)


@dataclass(frozen=True)
class _Rows:
    rows: list[tuple[Any, ...]]
    rowcount: int

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self.rows

    def fetchone(self) -> tuple[Any, ...] | None:
        return self.rows[0] if self.rows else None

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self.rows)


UNAVAILABLE_STATES = ("08", "53", "57P", "57014", "25006", "58")
"""SQLSTATE prefixes of a failure of the server or the connection, not of the statement: connection
exceptions, insufficient resources (disk full, too many connections), shutdown / cannot connect now,
a cancelled statement (statement_timeout), a read-only transaction (a standby, a failover), system errors."""


def unavailable(error: psycopg.Error) -> bool:
    """Whether `error` is the server or the connection failing (retry elsewhere, later) rather than the statement."""
    if error.sqlstate is None:  # raised by the client: the connection broke, timed out or was closed
        return isinstance(error, (psycopg.OperationalError, psycopg.InterfaceError))
    return error.sqlstate.startswith(UNAVAILABLE_STATES)


NETWORK_TIMEOUTS = {"keepalives": "1", "keepalives_idle": "10", "keepalives_interval": "5", "keepalives_count": "3",
                    "tcp_user_timeout": "15000"}
"""libpq options that make a silently cut network fail a connection in seconds rather than the kernel's
minutes: TCP keepalives on idle connections, and 15 s for data sent but not acknowledged (a statement
in flight); a long query the server is still computing sends nothing, so it is not cut."""


def network_timeouts(dsn: str) -> dict[str, str]:
    """NETWORK_TIMEOUTS that `dsn` does not set itself (its own values win)."""
    given = conninfo_to_dict(dsn)
    return {name: value for name, value in NETWORK_TIMEOUTS.items() if name not in given}


def _verb(what: str) -> str:
    """What a statement does, for a message: its first word."""
    return what.split(None, 1)[0] if what.strip() else "statement"


def configure(conn: psycopg.Connection[Any]) -> None:
    # READ COMMITTED whatever the server's default: each statement of an append after the
    # lock must see the appends committed before it (a snapshot from before the lock would not).
    conn.isolation_level = IsolationLevel.READ_COMMITTED
    conn.execute("SET TIME ZONE 'UTC'")  # recorded_at comes back as UTC


