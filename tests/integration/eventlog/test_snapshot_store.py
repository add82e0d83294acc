"""The snapshot port (sluice.eventlog.snapshots) on every adapter: SQLite, PostgreSQL (a real server),
KurrentDB (the fake client here; a live server too when SLUICE_KURRENTDB_URL is set)."""
from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Callable, Iterator

import pytest

from sluice.clock import SimulatedClock
from sluice.eventlog import NO_STREAM
from sluice.eventlog.kurrentdb import KurrentEventLog
from sluice.eventlog.postgres import PostgresEventLog
from sluice.eventlog.snapshots import Snapshot, snapshot_store
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.eventlog.truncated import LogUntil
from tests.support.postgres import PostgresServer

from tests.integration.eventlog.contract import everything, new_events
from tests.unit.test_kurrentdb_fake import FakeKurrentServer

pytestmark = pytest.mark.integration

KURRENTDB_URL = os.environ.get("SLUICE_KURRENTDB_URL", "")
ADAPTERS = ["sqlite", "postgres", "kurrentdb-fake",
            pytest.param("kurrentdb", marks=[pytest.mark.external_server,
                                             pytest.mark.skipif(not KURRENTDB_URL, reason="SLUICE_KURRENTDB_URL is not set")])]


@pytest.fixture(params=ADAPTERS)
def open_log(request, tmp_path: Path) -> Iterator[Callable[[], object]]:
    """Opens (again) the same store: what a restarted service, or one on another machine, sees."""
    clock = SimulatedClock()
    opened = []
    if request.param == "sqlite":
        make = lambda: SqliteEventLog(tmp_path / "log.db", clock=clock)  # noqa: E731
    elif request.param == "postgres":
        dsn = request.getfixturevalue("postgres").create_database()
        make = lambda: PostgresEventLog(dsn, clock=clock)  # noqa: E731
    elif request.param == "kurrentdb-fake":
        server = FakeKurrentServer()
        make = lambda: KurrentEventLog(server.client(), prefix="app-", clock=clock)  # noqa: E731
    else:
        from kurrentdbclient import KurrentDBClient
        from sluice.eventlog.kurrentdb_codec import parse_url
        client_url, base = parse_url(KURRENTDB_URL)
        prefix = f"{base}test-{uuid.uuid4().hex[:12]}-"
        make = lambda: KurrentEventLog(KurrentDBClient(client_url), prefix=prefix, clock=clock)  # noqa: E731

    def open_() -> object:
        log = make()
        opened.append(log)
        return log

    yield open_
    for log in opened:
        log.close()


def test_no_snapshot_reads_as_none(open_log) -> None:
    log = open_log()
    assert snapshot_store(log) is log
    assert log.read_snapshot("matcher") is None
    assert log.delete_snapshot("matcher") is False


def test_saved_snapshot_survives_reopening_byte_for_byte(open_log) -> None:
    data = bytes(range(256)) * 4096 + b"\x00end"  # 1 MiB with every byte value
    first = open_log()
    first.save_snapshot(Snapshot("matcher", 1234, "schema-a", data))
    first.close()
    assert open_log().read_snapshot("matcher") == Snapshot("matcher", 1234, "schema-a", data)


def test_saving_again_replaces_and_names_are_independent(open_log) -> None:
    log = open_log()
    log.save_snapshot(Snapshot("registry", 10, "a", b"one"))
    log.save_snapshot(Snapshot("jobs", 11, "a", b"jobs"))
    log.save_snapshot(Snapshot("registry", 20, "b", b"two"))
    assert log.read_snapshot("registry") == Snapshot("registry", 20, "b", b"two")
    assert log.read_snapshot("jobs") == Snapshot("jobs", 11, "a", b"jobs")


def test_delete_forgets_one_name_and_a_new_save_works(open_log) -> None:
    log = open_log()
    log.save_snapshot(Snapshot("registry", 10, "a", b"one"))
    log.save_snapshot(Snapshot("jobs", 11, "a", b"jobs"))
    assert log.delete_snapshot("registry") is True
    assert log.read_snapshot("registry") is None
    assert log.delete_snapshot("registry") is False
    assert log.read_snapshot("jobs") is not None
    log.save_snapshot(Snapshot("registry", 30, "a", b"three"))
    assert log.read_snapshot("registry") == Snapshot("registry", 30, "a", b"three")


def test_snapshots_are_not_events_of_the_log(open_log) -> None:
    log = open_log()
    log.append("s", new_events(3), NO_STREAM)
    head = log.head_position()
    log.save_snapshot(Snapshot("s-state", head, "a", b"state"))
    log.delete_snapshot("s-state")
    log.save_snapshot(Snapshot("s-state", head, "a", b"state"))
    assert [e.stream for e in everything(log)] == ["s", "s", "s"]
    assert log.head_position() == head


def test_a_view_of_the_past_offers_no_snapshots(open_log) -> None:
    log = open_log()
    log.append("s", new_events(2), NO_STREAM)
    assert snapshot_store(LogUntil(log, 1)) is None
