"""PostgresEventLog's deferred appends against their contract (deferred_contract.py), on a real server:
committed at once without waiting for the WAL flush, flushed together later; plus what only PostgreSQL
has: a commit made asynchronous by the session, a read racing a commit in flight, and a backend lost
between a commit and its flush.

The test server runs with synchronous_commit off (tests/support/postgres.py); these logs ask for it on
in their connection string, as a production server has it."""
from __future__ import annotations

import asyncio
from datetime import datetime, timezone

import psycopg
import pytest

from sluice.eventlog.deferred import DurabilityLost, deferring
from sluice.eventlog.port import NO_STREAM
from sluice.eventlog.postgres import PostgresEventLog
from sluice.eventlog.postgres_flush import Backend
from tests.integration.eventlog.deferred_contract import NEVER, DeferredAppendsContract, event, served
from tests.support.postgres import PostgresServer

pytestmark = pytest.mark.integration

SYNCHRONOUS = " options='-c synchronous_commit=on'"


@pytest.fixture
def dsn(postgres: PostgresServer) -> str:
    return postgres.create_database() + SYNCHRONOUS


@pytest.fixture
def log(dsn: str):
    log = PostgresEventLog(dsn, poll_interval=NEVER)
    yield log
    log.close()


class TestPostgresDeferredAppends(DeferredAppendsContract):
    def flushes(self, log: PostgresEventLog) -> int:
        return log.durability_flushes


def wal_positions(dsn: str) -> tuple[int, int]:
    """The server's WAL insert and flush positions (bytes)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT pg_current_wal_insert_lsn() - '0/0', pg_current_wal_flush_lsn() - '0/0'").fetchone()


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


async def test_a_read_racing_a_deferred_commit_in_flight_stops_before_its_events(log):
    log.append("s", [event("a")], NO_STREAM)
    with deferring():
        log.append("s", [event("b")], 0)
    assert [e.id for e in log._read_durable_all(0, 10, ())] == ["a"]  # b held back
    log.append("s", [event("c")], 1)  # durable: b with it
    with log._held_back.in_flight({"c"}):  # as if the read came between c's commit and its being held
        assert [e.id for e in log._read_durable_all(0, 10, ())] == ["a", "b"]
        events, head = log._read_durable_to_head(0, 10, ("s",))
        assert [e.id for e in events] == ["a", "b"] and head == log.read_stream("s")[-1].position - 1


async def test_a_session_that_commits_asynchronously_already_never_defers(postgres: PostgresServer):
    log = PostgresEventLog(postgres.create_database(), poll_interval=NEVER)  # the test server's synchronous_commit=off
    try:
        following = log.subscribe_batches(0)
        with deferring() as appends:
            log.append("s", [event("a")], NO_STREAM)
        await appends.durable()
        assert await served(following) == ["a"] and log._commits is None
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
    elsewhere = log._commits.committed(Backend(0, datetime.now(timezone.utc)), durable=True)
    assert not log._commits.is_durable(elsewhere - 1)
    await appends.durable()
    assert log.durability_flushes == 1
