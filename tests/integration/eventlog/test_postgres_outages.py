"""The PostgreSQL event log through connections that die: backends terminated between and during
appends, the server stopped and started, an append whose result was lost after it committed. And
its schema: `migrate`, an instance that only checks it, and a role that may only read."""
from __future__ import annotations

import subprocess
import sys
import time
from typing import Any, Sequence

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from sluice.eventlog import (ANY_VERSION, NO_STREAM, Checkpoint, DuplicateEventId, EventLogNotMigrated,
                             EventLogUnavailable, StreamAppend, WrongExpectedVersion)
from sluice.eventlog.snapshots import Snapshot
from sluice.eventlog.postgres import SCHEMA_VERSION, PostgresEventLog, _Written, migrate
from sluice.eventlog import NewEvent
from tests.integration.eventlog.contract import everything


def new_events(count: int, prefix: str = "e-") -> list[NewEvent]:
    """Events with ids of their own choosing (a retry by the caller sends the same ids again)."""
    return [NewEvent(id=f"{prefix}{n}", type="Happened", data=b"{}") for n in range(count)]
from tests.support.postgres import PostgresServer

pytestmark = pytest.mark.integration


@pytest.fixture
def dsn(postgres: PostgresServer) -> str:
    return postgres.create_database()


def terminate_backends(postgres: PostgresServer, dsn: str) -> int:
    """pg_terminate_backend on every connection to `dsn`'s database; how many."""
    database = conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(postgres.dsn_for("postgres"), autocommit=True) as admin:
        return admin.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                             " WHERE datname = %s AND pid <> pg_backend_pid()", (database,)).fetchone()[0]


# -- reconnecting ------------------------------------------------------------------------------


def test_appends_and_reads_go_on_while_backends_are_terminated(postgres: PostgresServer, dsn: str) -> None:
    log = PostgresEventLog(dsn)
    try:
        killed = 0
        for n in range(20):
            killed += terminate_backends(postgres, dsn)
            assert log.append("s", new_events(2, prefix=f"e{n}-"), 2 * n - 1) == 2 * n + 1
            assert log.stream_version("s") == 2 * n + 1
        assert killed >= 20  # every append found its connection dead
        events = everything(log)
        assert [e.version for e in events] == list(range(40))
        assert len({e.id for e in events}) == 40
    finally:
        log.close()


class _LosingTheAnswer(PostgresEventLog):
    """Loses the connection right after its first append's statement committed (the answer never came
    back), as a server crash or a network cut after COMMIT would: the append's outcome is unknown."""

    lost = 0

    def _write(self, cur: psycopg.Cursor[Any], appends: Sequence[StreamAppend],
               checkpoints: Sequence[Checkpoint]) -> _Written:
        written = super()._write(cur, appends, checkpoints)
        if not self.lost:
            self.lost += 1
            cur.connection.close()  # the pool drops it; the retry gets another
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return written


@pytest.mark.parametrize("expected", [NO_STREAM, ANY_VERSION])
def test_an_append_committed_before_its_connection_was_lost_is_not_written_twice(dsn: str, expected: int) -> None:
    # The retry sends it again: refused on the version (NO_STREAM) or on its ids (ANY_VERSION,
    # DuplicateEventId), and the log shows the first attempt committed, so it returns as committed.
    log = _LosingTheAnswer(dsn)
    try:
        assert log.append("s", new_events(3), expected) == 2
        assert log.lost == 1
        assert [e.version for e in log.read_stream("s")] == [0, 1, 2]
    finally:
        log.close()


def test_a_checkpoint_append_committed_before_its_connection_was_lost_counts_as_committed(dsn: str) -> None:
    log = _LosingTheAnswer(dsn)
    try:
        log.append_batch([], checkpoints=[Checkpoint("consumer", 7, expected=0)])  # CheckpointMoved on the retry
        assert log.lost == 1 and log.read_checkpoint("consumer") == 7
    finally:
        log.close()


class _LosingTheRequest(PostgresEventLog):
    """Loses the connection before its first append's statement is sent, while another writer takes
    the same version or the same ids (`meanwhile`): the retry's refusal is a real one."""

    def __init__(self, dsn: str, meanwhile: Any) -> None:
        super().__init__(dsn)
        self.meanwhile, self.lost = meanwhile, 0

    def _write(self, cur: psycopg.Cursor[Any], appends: Sequence[StreamAppend],
               checkpoints: Sequence[Checkpoint]) -> _Written:
        if not self.lost:
            self.lost += 1
            self.meanwhile()
            raise psycopg.OperationalError("connection lost before the statement was sent")
        return super()._write(cur, appends, checkpoints)


def test_a_refusal_after_a_lost_connection_is_still_a_refusal(dsn: str) -> None:
    other = PostgresEventLog(dsn)
    same_version = _LosingTheRequest(dsn, lambda: other.append("s", new_events(1, prefix="other-"), NO_STREAM))
    same_ids = _LosingTheRequest(dsn, lambda: other.append("t", new_events(1, prefix="mine-"), NO_STREAM))
    try:
        with pytest.raises(WrongExpectedVersion):
            same_version.append("s", new_events(1), NO_STREAM)
        with pytest.raises(DuplicateEventId):
            same_ids.append("u", new_events(1, prefix="mine-"), ANY_VERSION)  # its id is in "t", not in "u"
        assert same_version.lost == same_ids.lost == 1
        assert [(e.stream, e.id) for e in everything(other)] == [("s", "other-0"), ("t", "mine-0")]
    finally:
        for log in (same_version, same_ids, other):
            log.close()


def test_the_server_down_is_event_log_unavailable_and_the_log_works_again_after_it_restarts() -> None:
    with PostgresServer() as postgres:
        log = PostgresEventLog(postgres.create_database(), retry_for=1.0)
        try:
            log.append("s", new_events(1), NO_STREAM)
            postgres.halt()
            started = time.monotonic()
            with pytest.raises(EventLogUnavailable):
                log.append("s", new_events(1, prefix="during-"), 0)
            with pytest.raises(EventLogUnavailable):
                log.read_all()
            with pytest.raises(EventLogUnavailable):
                log.ping(0.5)
            with pytest.raises(EventLogUnavailable):
                log.save_snapshot(Snapshot("s", 1, "v1", b"state"))
            assert time.monotonic() - started < 10
            postgres.resume()
            deadline = time.monotonic() + 30
            while True:
                try:
                    log.ping(1.0)
                    break
                except EventLogUnavailable:
                    assert time.monotonic() < deadline, "the pool did not reconnect within 30 s"
            # the append that failed is retried by its caller, with the same ids: written once
            assert log.append("s", new_events(1, prefix="during-"), 0) == 1
            assert [e.id for e in everything(log)] == ["e-0", "during-0"]
        finally:
            log.close()


def test_pooled_connections_fail_fast_on_a_silently_cut_network_unless_the_dsn_says_otherwise(dsn: str) -> None:
    log = PostgresEventLog(f"{dsn} tcp_user_timeout=7000")
    try:
        with log._conn.connection() as conn:
            used = conninfo_to_dict(conn.info.dsn)
        assert used["tcp_user_timeout"] == "7000" and used["keepalives_idle"] == "10"
    finally:
        log.close()


# -- the schema ---------------------------------------------------------------------------------


def test_an_instance_that_may_not_migrate_refuses_a_log_not_migrated(dsn: str) -> None:
    with pytest.raises(EventLogNotMigrated, match="sluice migrate"):
        PostgresEventLog(dsn, migrate=False)
    assert migrate(dsn) == SCHEMA_VERSION
    assert migrate(dsn) == SCHEMA_VERSION  # again: nothing changes
    log = PostgresEventLog(dsn, migrate=False)
    try:
        log.append("s", new_events(1), NO_STREAM)
        assert log.stream_version("s") == 0
    finally:
        log.close()


def test_a_log_from_before_schema_versions_is_not_migrated_until_migrate_runs(dsn: str) -> None:
    PostgresEventLog(dsn).close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE sluice_schema")  # as the schema was before it recorded a version
    with pytest.raises(EventLogNotMigrated, match="no Sluice schema"):
        PostgresEventLog(dsn, migrate=False)
    migrate(dsn)
    PostgresEventLog(dsn, migrate=False).close()


def sluice(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sluice_services.cli", *args], capture_output=True, text=True,
                          timeout=120, env=env)


def url(dsn: str, user: str) -> str:
    parts = conninfo_to_dict(dsn)
    return f"postgresql://{user}@{parts['host']}:{parts['port']}/{parts['dbname']}"


def test_sluice_migrate_then_read_only_tools_with_a_role_that_may_only_read(postgres: PostgresServer, dsn: str,
                                                                              tmp_path) -> None:
    owner = url(dsn, "postgres")
    refused = sluice("log", "stats", "--event-log", owner)
    assert refused.returncode == 1 and "sluice migrate" in refused.stderr, refused.stderr

    migrated = sluice("migrate", "--event-log", owner)
    assert migrated.returncode == 0, migrated.stderr
    assert f"schema version {SCHEMA_VERSION}" in migrated.stdout
    log = PostgresEventLog(dsn, migrate=False)
    try:
        log.append("schedule-a", new_events(2, prefix="a-"), NO_STREAM)
        log.append("run-b", new_events(1, prefix="b-"), NO_STREAM)
    finally:
        log.close()

    database = conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS sluice_reader")
        conn.execute("CREATE ROLE sluice_reader LOGIN")
        conn.execute("REVOKE ALL ON SCHEMA public FROM PUBLIC")  # nobody creates there by default
        conn.execute(f"GRANT CONNECT ON DATABASE {database} TO sluice_reader")
        conn.execute("GRANT USAGE ON SCHEMA public TO sluice_reader")
        conn.execute("GRANT SELECT ON ALL TABLES IN SCHEMA public TO sluice_reader")
    reader = url(dsn, "sluice_reader")
    try:
        stats = sluice("--json", "log", "stats", "--event-log", reader)
        assert stats.returncode == 0, stats.stderr
        assert '"head_position": 3' in stats.stdout and '"events": 3' in stats.stdout
        tail = sluice("log", "tail", "-n", "2", "--event-log", reader)
        assert tail.returncode == 0, tail.stderr
        assert "run-b" in tail.stdout and "schedule-a" in tail.stdout

        # the role really may only read: a migration and an append are refused
        assert sluice("migrate", "--event-log", reader).returncode == 1
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            with psycopg.connect(dsn, user="sluice_reader", autocommit=True) as conn:
                conn.execute("INSERT INTO checkpoints (name, value) VALUES ('x', 1)")
        # a server that may not migrate stops on a log not migrated: exit 2, one line naming sluice migrate
        fresh = url(postgres.create_database(), "postgres")
        served = sluice("serve", "registry", "--port", "0", "--no-migrate", "--event-log", fresh,
                        "--data-dir", str(tmp_path / "data"))
        assert served.returncode == 2, served.stderr
        assert served.stderr.strip().count("\n") == 0 and "sluice migrate" in served.stderr, served.stderr
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"REVOKE ALL ON DATABASE {database} FROM sluice_reader")
            conn.execute("REVOKE ALL ON ALL TABLES IN SCHEMA public FROM sluice_reader")
            conn.execute("REVOKE ALL ON SCHEMA public FROM sluice_reader")
            conn.execute("DROP ROLE sluice_reader")
