"""Errors of the service runtime (the bus side). The domain's refusals (InvalidArgument, NotFound,
...) live in sluice.domain.errors."""
from __future__ import annotations

import sqlite3
import sys
from dataclasses import dataclass


class MalformedMessage(Exception):
    """A bus message that cannot be handled (not decodable, wrong type, missing fields, ...).

    The consumer loop sends it to the dead-letter topic with this reason and carries on."""


# -- the two kinds of failure (issue 25) ---------------------------------------------------------

_SQLITE_INFRASTRUCTURE = ("SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_IOERR", "SQLITE_READONLY", "SQLITE_FULL",
                          "SQLITE_CANTOPEN", "SQLITE_PROTOCOL", "SQLITE_NOLFS")
_SQLITE_MESSAGES = ("database is locked", "disk i/o error", "readonly database", "database or disk is full",
                    "unable to open database file")
_KAFKA_INFRASTRUCTURE = ("KafkaConnectionError", "KafkaTimeoutError", "NodeNotReadyError", "RequestTimedOutError",
                         "NotEnoughReplicasError", "NotEnoughReplicasAfterAppendError", "NotLeaderForPartitionError",
                         "LeaderNotAvailableError", "CoordinatorNotAvailableError", "NotCoordinatorError",
                         "KafkaUnavailableError", "BrokerResponseError")


def is_infrastructure(error: BaseException) -> bool:
    """Whether `error` says the work's infrastructure failed (the event log or the bus unreachable, a
    disk full or read-only, a database locked or failing over, a timeout), not the work itself: such work
    waits and is retried for as long as it takes, never dead-lettered. The one place that tells.

    Infrastructure: EventLogUnavailable; OSError (ENOSPC, EROFS, EIO, ConnectionError, TimeoutError and the
    bus's KafkaUnreachable among them); sqlite3.OperationalError of a busy, locked, read-only, full or
    failing file; psycopg's OperationalError; aiokafka's retriable errors and timeouts. An error raised
    `from` one of these counts as one. Everything else is deterministic (a refusal, a malformed message)
    or a bug, which the caller treats as its own."""
    seen = 0
    while error is not None and seen < 8:
        if _infrastructure_itself(error):
            return True
        error, seen = error.__cause__, seen + 1
    return False


def _infrastructure_itself(error: BaseException) -> bool:
    from sluice.eventlog.port import EventLogUnavailable  # the port's own word for it

    if isinstance(error, (EventLogUnavailable, OSError)):
        return True
    if isinstance(error, sqlite3.OperationalError):
        name = getattr(error, "sqlite_errorname", "") or ""
        return name.startswith(_SQLITE_INFRASTRUCTURE) or any(text in str(error).lower() for text in _SQLITE_MESSAGES)
    psycopg = sys.modules.get("psycopg")  # never imported here: only a process using PostgreSQL raises its errors
    if psycopg is not None and isinstance(error, psycopg.OperationalError):
        return True
    kafka_errors = sys.modules.get("aiokafka.errors")
    if kafka_errors is not None and isinstance(error, kafka_errors.KafkaError):
        return bool(getattr(error, "retriable", False)) or type(error).__name__ in _KAFKA_INFRASTRUCTURE
    return False


@dataclass(frozen=True)
class Backoff:
    """Capped exponential backoff: `first` seconds, doubling, at most `cap`."""

    first: float = 0.1
    cap: float = 10.0

    def delay(self, attempt: int) -> float:
        """The wait after the `attempt`th failure (1-based)."""
        return min(self.cap, self.first * 2 ** min(attempt - 1, 64))
