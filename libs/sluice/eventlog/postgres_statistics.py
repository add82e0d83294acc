"""Statistics of a young log's events table, gathered as it grows.

A read by position plans along the position index only when PostgreSQL knows the table: never
analyzed, `position > x` is taken for a third of the rows whatever x, and the planner scans the
(stream, version) index for every event of the prefixes read, or the whole table, at each read.
Autovacuum analyzes a new table only at its first round (a minute by default) and then after each
tenth of growth, so a log's first minute, and a test's or benchmark's whole run, went without. Each
time the head doubles (from FIRST_AT until ANALYZED_UNTIL) an append starts an ANALYZE in a thread of
its own; past that, autovacuum's own rounds keep up. Without the owner's rights the server skips it
with a warning to that connection, and nothing else changes (docs/decisions.md)."""
from __future__ import annotations

import logging
import threading
from typing import Callable

log = logging.getLogger(__name__)

FIRST_AT = 1_000
ANALYZED_UNTIL = 1_000_000


class FreshStatistics:
    def __init__(self, analyze: Callable[[], None], first_at: int = FIRST_AT, until: int = ANALYZED_UNTIL) -> None:
        self._analyze = analyze
        self._next_at = first_at
        self._until = until
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.runs = 0
        """ANALYZEs finished (tests)."""

    def appended(self, head: int) -> None:
        """The log's head after an append: an ANALYZE starts when it reached the next threshold and none runs."""
        if head < self._next_at or head > self._until:
            return
        with self._lock:
            if head < self._next_at or self._thread is not None:
                return
            self._next_at = head * 2
            self._thread = threading.Thread(target=self._run, name="sluice-analyze", daemon=True)
            self._thread.start()

    def wait(self) -> None:
        """Until the ANALYZE under way, if any, ends (tests, close)."""
        thread = self._thread
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        try:
            self._analyze()
            self.runs += 1
        except Exception as error:  # the log closed, the server went away: the next threshold tries again
            log.debug("ANALYZE of the events table failed: %s", error)
        finally:
            with self._lock:
                self._thread = None
