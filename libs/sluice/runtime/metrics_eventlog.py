"""An event log that times its appends: the same log, its `append` and `append_batch` observed in
`sluice_eventlog_append_seconds` by operation and outcome (ok, conflict, error)."""
from __future__ import annotations

import time
from typing import Any, Sequence

from sluice.eventlog.port import Checkpoint, DuplicateEventId, EventLog, NewEvent, StreamAppend, WrongExpectedVersion
from sluice.runtime.metrics import Registry

APPEND_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class TimedEventLog:
    """Wraps `log`; everything but the appends goes to it untouched."""

    def __init__(self, log: EventLog, registry: Registry) -> None:
        self._log = log
        self._seconds = registry.histogram(
            "sluice_eventlog_append_seconds", "Time to append to the event log (one transaction), by outcome.",
            ("operation", "outcome"), buckets=APPEND_BUCKETS)
        for operation in ("append", "append_batch"):
            for outcome in ("ok", "conflict", "error"):
                self._seconds.labels(operation, outcome)

    @property
    def wrapped(self) -> EventLog:
        return self._log

    def append(self, stream: str, events: Sequence[NewEvent], expected_version: int, *,
               checkpoints: Sequence[Checkpoint] = ()) -> int:
        return self._timed("append", self._log.append, stream, events, expected_version, checkpoints=checkpoints)

    def append_batch(self, appends: Sequence[StreamAppend], *, checkpoints: Sequence[Checkpoint] = ()) -> list[int]:
        return self._timed("append_batch", self._log.append_batch, appends, checkpoints=checkpoints)

    def _timed(self, operation: str, append: Any, *args: Any, **kwargs: Any) -> Any:
        started, outcome = time.perf_counter(), "error"
        try:
            result = append(*args, **kwargs)
            outcome = "ok"
            return result
        except (WrongExpectedVersion, DuplicateEventId):
            outcome = "conflict"
            raise
        finally:
            self._seconds.labels(operation, outcome).observe(time.perf_counter() - started)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)
