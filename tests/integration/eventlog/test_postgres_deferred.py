"""PostgresEventLog's deferred appends (sluice.eventlog.deferred), on a real server: committed at once
without waiting for the WAL flush, flushed together later, and served to subscribers only once durable.
The same contract as tests/integration/eventlog/test_sqlite_deferred.py, plus what only PostgreSQL has:
a commit made asynchronous by the session, and a backend lost between a commit and its flush.

The test server runs with synchronous_commit off (tests/support/postgres.py); these logs ask for it on
in their connection string, as a production server has it."""
from __future__ import annotations

import asyncio
from datetime import datetime, timezone

import psycopg
import pytest

from sluice.eventlog.deferred import current, deferring
from sluice.eventlog.port import ANY_VERSION, NO_STREAM, Checkpoint, NewEvent, WrongExpectedVersion
from sluice.eventlog.postgres import PostgresEventLog
from sluice.eventlog.postgres_flush import Backend
from sluice.eventlog.deferred import DurabilityLost
from tests.support.postgres import PostgresServer

pytestmark = pytest.mark.integration

NEVER = 3600.0
"""A poll interval no test waits out: whatever a subscriber gets, a wake or a read brought it."""
SYNCHRONOUS = " options='-c synchronous_commit=on'"


def event(name: str) -> NewEvent:
    return NewEvent(name, "Happened", b"{}")


@pytest.fixture
def dsn(postgres: PostgresServer) -> str:
    return postgres.create_database() + SYNCHRONOUS


@pytest.fixture
def log(dsn: str):
    log = PostgresEventLog(dsn, poll_interval=NEVER)
    yield log
    log.close()


async def served(subscription, wait: float = 0.3) -> list[str]:
    """The ids a subscription is served within `wait` seconds."""
    ids: list[str] = []

    async def take() -> None:
        async for batch in subscription:
            ids.extend(e.id for e in batch)
    task = asyncio.create_task(take())
    await asyncio.sleep(wait)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return ids


def wal_positions(dsn: str) -> tuple[int, int]:
    """The server's WAL insert and flush positions (bytes)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT pg_current_wal_insert_lsn() - '0/0', pg_current_wal_flush_lsn() - '0/0'").fetchone()


async def test_a_deferred_append_is_committed_at_once_and_served_to_subscribers_once_durable(log):
    following = log.subscribe_batches(0)
    first = asyncio.ensure_future(following.__anext__())
    await asyncio.sleep(0.05)
    with deferring() as appends:
        assert log.append("s", [event("a")], NO_STREAM, checkpoints=[Checkpoint("consumed", 7)]) == 0
        assert log.append("s", [event("b")], 0) == 1
        with pytest.raises(WrongExpectedVersion):  # versions are checked against what committed
            log.append("s", [event("c")], 0)
    assert [e.id for e in log.read_stream("s")] == ["a", "b"] and log.read_checkpoint("consumed") == 7
    await asyncio.sleep(0.1)
    assert not first.done()  # not durable yet: held back
    await appends.durable()
    assert [e.id for e in await asyncio.wait_for(first, 1.0)] == ["a", "b"]
    assert log._flush.flushes == 1  # one flush for both commits
    await following.aclose()


async def test_a_deferred_append_does_not_wait_for_the_wal_flush_and_its_flush_covers_it(log, dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:  # the WAL writer flushes asynchronous commits only rarely
        conn.execute("ALTER SYSTEM SET wal_writer_delay = '10s'")
        conn.execute("SELECT pg_reload_conf()")
    try:
        await asyncio.sleep(0.3)
        with deferring() as appends:
            log.append("s", [event("a")], NO_STREAM)
        inserted, flushed = wal_positions(dsn)
        assert flushed < inserted
        await appends.durable()
        assert wal_positions(dsn)[1] >= inserted
        log.append("s", [event("b")], 0)  # outside the block: flushed when it returns
        inserted, flushed = wal_positions(dsn)
        assert flushed >= inserted
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM RESET wal_writer_delay")
            conn.execute("SELECT pg_reload_conf()")


async def test_a_durable_commit_after_deferred_ones_hands_them_all_over_in_order(log):
    following = log.subscribe_batches(0)
    with deferring():
        log.append("s", [event("a")], NO_STREAM)
    log.append("t", [event("b")], NO_STREAM)  # a synchronous commit: its flush covers the deferred one
    assert await served(following) == ["a", "b"]
    assert log._flush.flushes == 0


async def test_a_subscriber_reading_the_table_stops_before_an_append_not_durable_yet(log):
    log.append("s", [event("a")], NO_STREAM)
    with deferring() as appends:
        log.append("s", [event("b")], 0)
    log.append("s", [], ANY_VERSION)  # commits nothing: no flush, nothing made durable
    assert await served(log.subscribe_batches(0)) == ["a"]
    assert await served(log.subscribe_batches(0, prefixes=("s",))) == ["a"]
    await appends.durable()
    assert await served(log.subscribe_batches(0)) == ["a", "b"]


async def test_a_read_racing_a_deferred_commit_in_flight_stops_before_its_events(log):
    log.append("s", [event("a")], NO_STREAM)
    with deferring():
        log.append("s", [event("b")], 0)
        log.append("s", [event("c")], 1)
    held = log._undurable.pop()  # as if the read came between c's commit and its being held
    log._in_flight = frozenset({"c"})
    assert [e.id for e in log._read_durable_all(0, 10, ())] == ["a"]
    log._undurable.clear()
    assert [e.id for e in log._read_durable_all(0, 10, ())] == ["a", "b"]
    events, head = log._read_durable_to_head(0, 10, ("s",))
    assert [e.id for e in events] == ["a", "b"] and head == held.first - 1


async def test_appends_outside_a_deferring_block_or_after_it_ended_are_durable_at_once(log):
    with deferring(enabled=False):
        assert current() is None
        log.append("s", [event("a")], NO_STREAM)
    with deferring() as appends:
        pass
    assert current() is None
    log.append("s", [event("b")], 0)
    await appends.durable()  # nothing deferred: nothing to wait for
    assert log._flush.flushes == 0 and not log._undurable


async def test_a_session_that_commits_asynchronously_already_never_defers(postgres: PostgresServer):
    log = PostgresEventLog(postgres.create_database(), poll_interval=NEVER)  # the test server's synchronous_commit=off
    try:
        following = log.subscribe_batches(0)
        with deferring() as appends:
            log.append("s", [event("a")], NO_STREAM)
        await appends.durable()
        assert await served(following) == ["a"] and log._flush is None
    finally:
        log.close()


async def test_a_failed_flush_is_not_taken_for_an_outage(log, dsn):
    with deferring() as appends:
        log.append("s", [event("a")], NO_STREAM)
    with psycopg.connect(dsn, autocommit=True) as conn:  # the backend that committed it ends: a crash would too
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                     " WHERE datname = current_database() AND pid <> pg_backend_pid()")
    with pytest.raises(DurabilityLost) as raised:
        await appends.durable()
    assert raised.value.__cause__ is None  # sluice.runtime.errors would wait a psycopg OperationalError out
    assert await served(log.subscribe_batches(0)) == []


async def test_a_synchronous_commit_on_another_backend_does_not_vouch_for_deferred_ones(log):
    """Its flush covers them only if no crash came between, which only their own backend's survival shows."""
    with deferring() as appends:
        log.append("s", [event("a")], NO_STREAM)
    elsewhere = log._flush.committed(Backend(0, datetime.now(timezone.utc)), synchronous=True)
    assert not log._flush.is_durable(elsewhere - 1)
    await appends.durable()
    assert log._flush.flushes == 1
