"""The KurrentDB adapter against the event-log contract on a real server, and the server behaviour
the adapter relies on (`KurrentClientAssumptions`, which tests/unit also runs against the fake).

Needs a KurrentDB 25.1 or later (multi-stream append) named by SLUICE_KURRENTDB_URL, e.g.

    docker compose up -d kurrentdb
    SLUICE_KURRENTDB_URL='kurrentdb://127.0.0.1:2113?tls=false' pytest tests/integration/eventlog/test_kurrentdb.py

Without the variable every test here skips; the external_server marker allows that under CI=true.
Each test works under a fresh random stream prefix instead of a fresh database.
"""
from __future__ import annotations

import asyncio
import os
import threading
import uuid
from pathlib import Path

import pytest
from kurrentdbclient import KurrentDBClient

from sluice.clock import Clock, SimulatedClock
from sluice.eventlog import EventLog, RecordedEvent
from sluice.eventlog.kurrentdb import KurrentEventLog
from sluice.eventlog.kurrentdb_codec import parse_url

from tests.integration.eventlog.contract import TIMEOUT, DurableEventLogContract, everything, new_events, take
from tests.unit.test_kurrentdb_fake import KurrentClientAssumptions

URL = os.environ.get("SLUICE_KURRENTDB_URL", "")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.external_server,
    pytest.mark.skipif(not URL, reason="SLUICE_KURRENTDB_URL is not set: no KurrentDB server to test against "
                                       "(docker compose up -d kurrentdb; "
                                       "SLUICE_KURRENTDB_URL='kurrentdb://127.0.0.1:2113?tls=false')"),
]


def _open(prefix: str, clock: Clock | None = None, poll_interval: float = 0.05) -> KurrentEventLog:
    client_url, base_prefix = parse_url(URL)
    return KurrentEventLog(KurrentDBClient(client_url), prefix=base_prefix + prefix, clock=clock,
                           poll_interval=poll_interval)


def _fresh_prefix() -> str:
    return f"test-{uuid.uuid4().hex[:12]}-"


class TestKurrentDBEventLog(DurableEventLogContract):
    @pytest.fixture(autouse=True)
    def _fresh_streams(self) -> None:
        self.prefix = _fresh_prefix()

    def make_log(self, tmp_path: Path, clock: Clock) -> EventLog:
        return _open(self.prefix, clock)

    def reopen(self, log: EventLog, tmp_path: Path, clock: Clock) -> EventLog:
        log.close()
        return _open(self.prefix, clock)

    def open_instance(self, tmp_path: Path, clock: Clock, poll_interval: float) -> EventLog:
        return _open(self.prefix, clock, poll_interval)


class TestKurrentDBClientAssumptions(KurrentClientAssumptions):
    def make_client(self) -> KurrentDBClient:
        return KurrentDBClient(parse_url(URL)[0])


async def test_writers_on_separate_connections_never_make_a_reader_skip() -> None:
    """Several processes' worth of writers (one connection each) while a reader polls read_all(after=...)."""
    prefix, writers, appends_each = _fresh_prefix(), 4, 15
    logs = [_open(prefix) for _ in range(writers)]
    reader = _open(prefix, poll_interval=0.005)
    total = writers * appends_each * 2
    seen: list[RecordedEvent] = []
    writing = threading.Event()

    def poll_while_writing() -> None:
        while writing.is_set():
            seen.extend(reader.read_all(after=seen[-1].position if seen else 0))
        seen.extend(reader.read_all(after=seen[-1].position if seen else 0))

    def write(log: KurrentEventLog, stream: str) -> None:
        for n in range(appends_each):
            log.append(stream, new_events(2), 2 * n - 1)

    try:
        subscribed = asyncio.ensure_future(take(reader.subscribe(), total))
        writing.set()
        polling = asyncio.ensure_future(asyncio.to_thread(poll_while_writing))
        await asyncio.wait_for(asyncio.gather(*(asyncio.to_thread(write, log, f"w-{n}") for n, log in enumerate(logs))),
                               TIMEOUT * 4)
        writing.clear()
        await asyncio.wait_for(polling, TIMEOUT)

        committed = everything(reader)
        assert len(committed) == total
        assert seen == committed
        assert await subscribed == committed
    finally:
        for log in (*logs, reader):
            log.close()


def test_the_clock_not_the_server_dates_events() -> None:
    log = _open(_fresh_prefix(), SimulatedClock())
    try:
        log.append("s", new_events(1), -1)
        assert log.read_all()[0].recorded_at == SimulatedClock().now()
    finally:
        log.close()


def test_read_all_after_a_position_that_is_no_events() -> None:
    """`sluice log tail` reads from `head - n`; KurrentDB only starts reads at existing positions."""
    log = _open(_fresh_prefix())
    try:
        log.append("s", new_events(3), -1)
        events = log.read_all()
        assert log.read_all(after=events[0].position + 1) == events[1:]
        assert log.read_all(after=log.head_position() + 1) == []
    finally:
        log.close()
