"""How each dataset contract class opens event logs: `open_log()` gives a new connection (instance)
on the same store each time, as another process would. A contract's own fixtures depend on
`_backend`, which the subclass for each adapter provides."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from sluice.clock import Clock
from sluice.eventlog.port import EventLog
from sluice.eventlog.postgres import PostgresEventLog
from sluice.eventlog.sqlite import SqliteEventLog
from tests.support.postgres import PostgresServer


class Backend:
    opened: list[EventLog]

    def open_log(self, clock: Clock | None = None) -> EventLog:
        log = self._open(clock)
        self.opened.append(log)
        return log

    def _open(self, clock: Clock | None) -> EventLog:
        raise NotImplementedError

    def _close_all(self) -> None:
        for log in self.opened:
            log.close()


class SqliteBackend(Backend):
    @pytest.fixture(autouse=True)
    def _backend(self, tmp_path: Path) -> Iterator[None]:
        self.path, self.opened = tmp_path / "events.db", []
        yield
        self._close_all()

    def _open(self, clock: Clock | None) -> EventLog:
        return SqliteEventLog(self.path, clock=clock)


class PostgresBackend(Backend):
    @pytest.fixture(autouse=True)
    def _backend(self, postgres: PostgresServer) -> Iterator[None]:
        self.dsn, self.opened = postgres.create_database(), []
        yield
        self._close_all()

    def _open(self, clock: Clock | None) -> EventLog:
        return PostgresEventLog(self.dsn, clock=clock)
