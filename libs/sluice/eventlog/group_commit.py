"""Group commit: tickets for an event log's commits, some not durable when they return (deferred, see
sluice.eventlog.deferred), and one flush at a time that makes every commit made before it started
durable. Callers arriving while a flush runs share the next one. Thread-safe.

The flush is the adapter's: SQLite fsyncs the WAL file (sluice.sqlite_wal), PostgreSQL flushes the
server's WAL and checks that the backends which made the commits still live (postgres_flush). A commit
not durable may name who made it (`by`); the flush is given the makers of the commits it covers. A
commit durable by itself (its own fsync or flush) made every earlier one durable as well, but only if
none of them waits for a check of another maker (pending, or in a flush under way).
"""
from __future__ import annotations

import threading
from typing import Callable, Generic, Hashable, TypeVar

Maker = TypeVar("Maker", bound=Hashable)


class GroupCommit(Generic[Maker]):
    """Tickets and the group flush; `flush(makers)` raises when the commits cannot be known durable."""

    def __init__(self, flush: Callable[[list[Maker]], None]) -> None:
        self._flush = flush
        self._cond = threading.Condition()
        self._committed = 0
        self._durable = 0
        self._makers: set[Maker] = set()
        """The makers of the commits not durable since the last flush started."""
        self._checking: list[Maker] | None = None
        """The makers the flush under way checks (None: no flush under way)."""
        self.flushes = 0
        """Flushes run so far (tests)."""

    def committed(self, by: Maker | None = None, *, durable: bool) -> int:
        """A commit returned, made `by` that maker (if the flush must check it); its ticket."""
        with self._cond:
            self._committed += 1
            if not durable:
                if by is not None:
                    self._makers.add(by)
            elif self._makers <= {by} and not self._checking:
                self._durable = self._committed
                self._makers.clear()
            return self._committed

    def is_durable(self, ticket: int) -> bool:
        return ticket <= self._durable

    def sync_to(self, ticket: int) -> int:
        """Block until commit `ticket` is durable; the highest ticket durable then."""
        with self._cond:
            while self._durable < ticket:
                if self._checking is not None:
                    self._cond.wait()
                    continue
                target, checking = self._committed, list(self._makers)
                self._checking, self._makers = checking, set()
                self._cond.release()
                try:
                    self._flush(checking)
                except BaseException:
                    self._cond.acquire()
                    self._makers.update(checking)  # a later flush must check them again
                    self._checking = None
                    self._cond.notify_all()
                    raise
                self._cond.acquire()
                self._checking = None
                self._cond.notify_all()
                self.flushes += 1
                self._durable = max(self._durable, target)
            return self._durable
