"""Choosing adapters by URL: the event log and the bus a process runs on.

| setting   | URL                                   | adapter                               |
|-----------|---------------------------------------|---------------------------------------|
| event log | (empty) or sqlite:///path/events.db   | SQLite file (default: <data-dir>/events.db) |
| event log | postgresql://user@host:port/db        | PostgreSQL                            |
| event log | kurrentdb://host:2113?tls=false       | KurrentDB 25.1+ (also esdb://, kdb://; &streamPrefix=p-) |
| bus       | (empty) or inprocess:///path/bus.db   | durable in-process bus (default: <data-dir>/bus.db) |
| bus       | kafka://host:port[,host:port]         | Kafka                                 |
| bus       | kafka://host:port?security_protocol=SASL_SSL&ssl_cafile=ca.pem | Kafka, TLS and SCRAM-SHA-512 logins |

Kafka's login comes from SLUICE_KAFKA_USERNAME / SLUICE_KAFKA_PASSWORD; every option is in sluice.bus.kafka_security.
"""
from __future__ import annotations

from pathlib import Path

from sluice.bus.port import Bus
from sluice.clock import Clock
from sluice.eventlog.port import EventLog
from sluice.domain.errors import InvalidArgument
from sluice.runtime.secrets import mask_text, mask_url

KURRENTDB_SCHEMES = ("kurrentdb", "kurrentdb+discover", "kdb", "kdb+discover", "esdb", "esdb+discover")
"""kurrentdbclient's URL schemes, named here so that choosing an adapter does not import grpc."""


def open_event_log(url: str, data_dir: Path, clock: Clock, *, migrate: bool = True) -> EventLog:
    """`migrate`: create or update PostgreSQL's schema first (False: check it, EventLogNotMigrated; the
    other stores set up their own)."""
    if not url or url.startswith("sqlite://"):
        from sluice.eventlog.sqlite import SqliteEventLog

        return SqliteEventLog(url.removeprefix("sqlite://") or data_dir / "events.db", clock=clock)
    if url.startswith(("postgresql://", "postgres://")):
        from sluice.eventlog.postgres import PostgresEventLog

        return PostgresEventLog(url, clock=clock, migrate=migrate)
    if url.startswith(tuple(f"{scheme}://" for scheme in KURRENTDB_SCHEMES)):
        from sluice.eventlog.kurrentdb import KurrentEventLog

        try:
            return KurrentEventLog.from_url(url, clock=clock)
        except ValueError as error:  # an unknown option, a "$" prefix...
            raise InvalidArgument("--event-log", f"{mask_url(url)!r}: {mask_text(str(error), url)}") from error
    raise InvalidArgument("--event-log",
                          f"unsupported URL {mask_url(url)!r} (sqlite:///path, postgresql://... or kurrentdb://host:port)")


def open_bus(url: str, data_dir: Path, clock: Clock) -> Bus:
    if not url or url.startswith("inprocess://"):
        from sluice.bus.inprocess import InProcessBus

        return InProcessBus(url.removeprefix("inprocess://") or data_dir / "bus.db", clock=clock)
    if url.startswith("kafka://"):
        from sluice.bus.kafka import KafkaBus

        try:
            return KafkaBus.from_url(url)
        except ValueError as error:  # an unknown option, a missing password...: named in the message
            raise InvalidArgument("--bus", f"{mask_url(url)!r}: {error}") from None
    raise InvalidArgument("--bus", f"unsupported URL {mask_url(url)!r} (inprocess:///path or kafka://host:port)")
