"""Open the event log a URL names (what a launched program is told in context.json `system.event_log`).

| URL                                  | adapter    |
|--------------------------------------|------------|
| sqlite:///abs/path/events.db         | SQLite     |
| postgresql://user@host:port/db       | PostgreSQL |
"""
from __future__ import annotations

from pathlib import Path

from sluice.clock import Clock, SystemClock
from sluice.eventlog.port import EventLog


def sqlite_url(path: Path) -> str:
    return f"sqlite://{Path(path).resolve()}"


def open_log(url: str, clock: Clock | None = None) -> EventLog:
    clock = clock or SystemClock()
    if url.startswith("sqlite://"):
        from sluice.eventlog.sqlite import SqliteEventLog

        return SqliteEventLog(url.removeprefix("sqlite://"), clock=clock)
    if url.startswith(("postgresql://", "postgres://")):
        from sluice.eventlog.postgres import PostgresEventLog

        return PostgresEventLog(url, clock=clock)
    raise ValueError(f"event log URL {url!r}: expected sqlite:///path or postgresql://...")
