"""The PostgreSQL adapter against the event-log contract, on a real server this module starts, plus
what only PostgreSQL has: positions taken before commit by concurrent writers (the late commit).

The server binaries must be installed (`make postgres`); without them every test here fails,
with that hint, instead of skipping.
"""
from __future__ import annotations

import asyncio
import random
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

import psycopg
import pytest

from sluice.clock import Clock
from sluice.eventlog import NO_STREAM, Checkpoint, EventLog, RecordedEvent, StreamAppend
from sluice.eventlog.postgres import PostgresEventLog
from tests.support.postgres import PostgresNotInstalled, PostgresServer, find_bin_dir

from tests.integration.eventlog.contract import (
    TIMEOUT,
    DurableEventLogContract,
    assert_nothing_more,
    everything,
    new_events,
    take,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def dsn(postgres: PostgresServer) -> str:
    return postgres.create_database()


class TestPostgresEventLog(DurableEventLogContract):
    @pytest.fixture(autouse=True)
    def _fresh_database(self, dsn: str) -> None:
        self.dsn = dsn

    def make_log(self, tmp_path: Path, clock: Clock) -> EventLog:
        return PostgresEventLog(self.dsn, clock=clock)

    def reopen(self, log: EventLog, tmp_path: Path, clock: Clock) -> EventLog:
        log.close()
        return PostgresEventLog(self.dsn, clock=clock)

    def open_instance(self, tmp_path: Path, clock: Clock, poll_interval: float) -> EventLog:
        return PostgresEventLog(self.dsn, clock=clock, poll_interval=poll_interval)


# -- the late commit ---------------------------------------------------------------------------


class _InTransaction(PostgresEventLog):
    """Runs each append's statement in a transaction of its own, so `_write` can hold it open."""

    @contextmanager
    def _append_cursor(self, conn: psycopg.Connection[Any]) -> Iterator[psycopg.Cursor[Any]]:
        with conn.transaction(), conn.cursor() as cur:
            yield cur


class _HoldingLog(_InTransaction):
    """Keeps each append's transaction open after its inserts (positions taken, nothing committed)
    until `release` is set, or raises `fail_with` there (the append then rolls back)."""

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self.holding = threading.Event()
        self.release = threading.Event()
        self.fail_with: BaseException | None = None

    def _write(
        self, cur: psycopg.Cursor[Any], appends: Sequence[StreamAppend], checkpoints: Sequence[Checkpoint]
    ) -> list[int]:
        versions = super()._write(cur, appends, checkpoints)
        self.holding.set()
        if not self.release.wait(TIMEOUT):
            raise TimeoutError("the test never released this append")
        if self.fail_with is not None:
            raise self.fail_with
        return versions


class _JitteryLog(_InTransaction):
    """Waits 0-3 ms between its inserts and its commit: concurrent writers overlap in flight."""

    def __init__(self, dsn: str, seed: int) -> None:
        super().__init__(dsn)
        self._random = random.Random(seed)

    def _write(
        self, cur: psycopg.Cursor[Any], appends: Sequence[StreamAppend], checkpoints: Sequence[Checkpoint]
    ) -> list[int]:
        versions = super()._write(cur, appends, checkpoints)
        time.sleep(self._random.uniform(0, 0.003))
        return versions


class _Poller:
    """A reader's loop over read_all(after=last seen position): what a partition consumer does."""

    def __init__(self, log: EventLog) -> None:
        self.log = log
        self.seen: list[RecordedEvent] = []

    def poll(self) -> None:
        self.seen.extend(self.log.read_all(after=self.seen[-1].position if self.seen else 0))


async def test_an_append_committing_after_a_later_one_is_never_skipped(dsn: str) -> None:
    # slow takes its position first and commits last; fast tries to append in between. A naive
    # log lets fast commit positions above slow's, and a reader past them never looks back.
    slow, fast = _HoldingLog(dsn), PostgresEventLog(dsn)
    reader = PostgresEventLog(dsn, poll_interval=0.01)
    try:
        reader.append("before", new_events(1), NO_STREAM)
        poller = _Poller(reader)
        subscribed = asyncio.ensure_future(take(reader.subscribe(), 4))  # polling all along

        slow_append = asyncio.ensure_future(asyncio.to_thread(slow.append, "slow", new_events(1), NO_STREAM))
        assert await asyncio.to_thread(slow.holding.wait, TIMEOUT)
        fast_append = asyncio.ensure_future(asyncio.to_thread(fast.append, "fast", new_events(2), NO_STREAM))
        for _ in range(20):  # while slow is in flight, whatever fast does
            await asyncio.to_thread(poller.poll)
            await asyncio.sleep(0.01)
        slow.release.set()
        await asyncio.wait_for(asyncio.gather(slow_append, fast_append), TIMEOUT)
        await asyncio.to_thread(poller.poll)

        committed = everything(reader)
        assert [e.stream for e in committed] == ["before", "slow", "fast", "fast"]
        assert poller.seen == committed  # every event, once, in position order: none skipped
        assert await subscribed == committed
    finally:
        slow.release.set()
        for log in (slow, fast, reader):
            log.close()


async def test_concurrent_writers_in_flight_never_make_a_reader_skip(dsn: str) -> None:
    writers, appends_each = 4, 15
    logs = [_JitteryLog(dsn, seed=n) for n in range(writers)]  # one connection each, as if processes
    reader = PostgresEventLog(dsn, poll_interval=0.005)
    total = writers * appends_each * 2
    try:
        poller, writing = _Poller(reader), threading.Event()
        subscribed = asyncio.ensure_future(take(reader.subscribe(), total))

        def poll_while_writing() -> None:
            while writing.is_set():
                poller.poll()
            poller.poll()

        def write(log: PostgresEventLog, stream: str) -> None:
            for n in range(appends_each):
                log.append(stream, new_events(2), 2 * n - 1)

        writing.set()
        polling = asyncio.ensure_future(asyncio.to_thread(poll_while_writing))
        await asyncio.wait_for(
            asyncio.gather(*(asyncio.to_thread(write, log, f"w-{n}") for n, log in enumerate(logs))), TIMEOUT * 2
        )
        writing.clear()
        await asyncio.wait_for(polling, TIMEOUT)

        committed = everything(reader)
        assert len(committed) == total
        assert poller.seen == committed
        assert await subscribed == committed
    finally:
        for log in (*logs, reader):
            log.close()


async def test_a_rolled_back_append_leaves_a_gap_nobody_waits_for(dsn: str) -> None:
    failing, log = _HoldingLog(dsn), PostgresEventLog(dsn, poll_interval=0.01)
    try:
        log.append("a", new_events(1), NO_STREAM)
        subscription = log.subscribe()
        assert len(await take(subscription, 1)) == 1

        failing.fail_with = RuntimeError("crash before commit")
        failing.release.set()
        with pytest.raises(RuntimeError):
            failing.append("lost", new_events(2), NO_STREAM)  # took two positions, then rolled back
        log.append("a", new_events(1), 0)

        after_gap = await take(subscription, 1)
        first = log.read_all()
        assert [e.stream for e in first] == ["a", "a"]
        assert after_gap == first[1:] and first[1].position > first[0].position + 1  # the gap
        assert log.read_stream("lost") == []
        await assert_nothing_more(subscription)
    finally:
        failing.close()
        log.close()


# -- several instances on one database ---------------------------------------------------------


def test_instances_opening_a_new_database_at_once_create_the_schema_once(dsn: str) -> None:
    logs: list[PostgresEventLog] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(6, timeout=TIMEOUT)

    def open_log() -> None:
        try:
            barrier.wait()
            logs.append(PostgresEventLog(dsn))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=open_log) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT * 2)
    try:
        assert not errors, errors
        logs[0].append("s", new_events(1), NO_STREAM)
        assert all(log.stream_version("s") == 0 for log in logs)
    finally:
        for log in logs:
            log.close()


# -- the server fixture --------------------------------------------------------------------------


def test_missing_server_binaries_fail_with_the_install_hint(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SLUICE_POSTGRES_BIN", str(tmp_path / "nowhere"))
    with pytest.raises(PostgresNotInstalled, match="make postgres"):
        find_bin_dir()


# -- filtered reads ------------------------------------------------------------------------------


def test_a_filtered_read_near_the_head_walks_the_position_index(dsn: str) -> None:
    """What every subscription read does: no sequential scan of the log, whatever the filter."""
    log = PostgresEventLog(dsn)
    try:
        for n in range(40):
            log.append_batch([StreamAppend(f"matcher-{n}", new_events(50), NO_STREAM),
                              StreamAppend(f"schedule-{n}", new_events(1), NO_STREAM)])
        log._conn.execute("ANALYZE events")
        for prefixes in (["schedule-"], ["matcher-", "checker-queue"]):
            sql, params = log.read_all_query(log.head_position() - 60, 500, prefixes)
            plan = "\n".join(row[0] for row in log._conn.execute("EXPLAIN " + sql.format(p="%s"), params))
            assert "Index Scan using events_pkey" in plan and "Seq Scan" not in plan, plan
    finally:
        log.close()


def test_a_young_log_gathers_its_statistics_as_it_grows(dsn: str) -> None:
    """Never analyzed, the table had a filtered read scan every event of its prefixes (a bitmap of the
    (stream, version) index) or the whole table: the log analyzes it as its head doubles, before autovacuum
    (off here) would have."""
    log = PostgresEventLog(dsn)
    try:
        log._conn.execute("ALTER TABLE events SET (autovacuum_enabled = false)")
        for n in range(40):
            log.append_batch([StreamAppend(f"matcher-{n}", new_events(50), NO_STREAM),
                              StreamAppend(f"schedule-{n}", new_events(1), NO_STREAM)])
        log._statistics.wait()
        assert log._statistics.runs >= 1
        assert log._conn.execute("SELECT reltuples FROM pg_class WHERE relname = 'events'").fetchone()[0] > 0
        for prefixes in (["schedule-"], ["matcher-", "checker-queue"]):
            sql, params = log.read_all_query(log.head_position() - 60, 500, prefixes)
            plan = "\n".join(row[0] for row in log._conn.execute("EXPLAIN " + sql.format(p="%s"), params))
            assert "Index Scan using events_pkey" in plan and "Bitmap" not in plan and "Seq Scan" not in plan, plan
    finally:
        log.close()


@pytest.mark.timeout(60)
def test_a_young_logs_analyze_gives_up_behind_a_lock_holder(dsn: str) -> None:
    """An anti-wraparound vacuum holds the table's lock for as long as it takes: the ANALYZE waits a second
    for it, not for ever, and `close`, which waits for the ANALYZE, returns."""
    log = PostgresEventLog(dsn)
    with psycopg.connect(dsn) as holder:
        holder.execute("LOCK TABLE events IN SHARE UPDATE EXCLUSIVE MODE")  # what VACUUM and ANALYZE take
        for n in range(25):
            log.append_batch([StreamAppend(f"matcher-{n}", new_events(50), NO_STREAM)])
        log.close()
        assert log._statistics.runs == 0


def test_a_read_by_position_is_planned_where_it_starts_not_prepared(dsn: str) -> None:
    """A generic plan prepared while the log was small (psycopg prepares what runs 5 times) kept scanning
    the whole table as the log grew, until its statistics were gathered again: reads are planned each time."""
    log = PostgresEventLog(dsn)
    try:
        log.append_batch([StreamAppend("matcher-1", new_events(3), NO_STREAM)])
        for _ in range(10):
            log.read_all(0, 500, ["matcher-"])
            log.read_all_to_head(0, 500, ["matcher-"])
            log.read_all(0, 500)
        prepared = log._conn.execute("SELECT statement FROM pg_prepared_statements"
                                     " WHERE statement LIKE '%FROM events WHERE position >%'").fetchall()
        assert prepared == []
    finally:
        log.close()
