"""A read-only view of an event log as it was at a position: what `sluice replay --until` folds.

Every read stops at `until`; writes are refused, so a service rebuilt on the view cannot change
the real log. Checkpoints are not positions of the log and read as absent."""
from __future__ import annotations

from typing import AsyncIterator, Iterable, Sequence

from sluice.eventlog.port import (Checkpoint, EventLog, NewEvent, RecordedEvent, StreamAppend, head_then_read,
                                 versions_read)


class ReadOnlyLog(Exception):
    """A write to a view of the log as it was."""


class LogUntil:
    def __init__(self, log: EventLog, until: int) -> None:
        self._log = log
        self._until = until

    def read_stream(self, stream: str, from_version: int = 0, limit: int | None = None) -> list[RecordedEvent]:
        # A stream's events past `until` are its last ones: limiting first keeps the same answer.
        return [event for event in self._log.read_stream(stream, from_version, limit) if event.position <= self._until]

    def stream_version(self, stream: str) -> int:
        events = self.read_stream(stream)
        return events[-1].version if events else -1

    def read_all(self, after: int = 0, limit: int = 1000, prefixes: Sequence[str] = ()) -> list[RecordedEvent]:
        return [event for event in self._log.read_all(after, limit, prefixes) if event.position <= self._until]

    def read_all_to_head(self, after: int = 0, limit: int = 1000,
                         prefixes: Sequence[str] = ()) -> tuple[list[RecordedEvent], int]:
        return head_then_read(self, after, limit, prefixes)

    def stream_versions(self, after: int = 0, prefixes: Sequence[str] = ()) -> dict[str, int]:
        return versions_read(self, after, prefixes)

    def head_position(self) -> int:
        return min(self._log.head_position(), self._until)

    def read_checkpoint(self, name: str) -> int | None:
        return None

    def read_checkpoints(self, names: Iterable[str]) -> dict[str, int]:
        return {}

    def append(self, stream: str, events: Sequence[NewEvent], expected_version: int, *,
               checkpoints: Sequence[Checkpoint] = ()) -> int:
        raise ReadOnlyLog(f"the log as of position {self._until} is read-only")

    def append_batch(self, appends: Sequence[StreamAppend], *, checkpoints: Sequence[Checkpoint] = ()) -> list[int]:
        raise ReadOnlyLog(f"the log as of position {self._until} is read-only")

    def save_checkpoint(self, checkpoint: Checkpoint) -> None:
        raise ReadOnlyLog(f"the log as of position {self._until} is read-only")

    async def subscribe(self, after: int = 0, prefixes: Sequence[str] = ()) -> AsyncIterator[RecordedEvent]:
        for event in self.read_all(after, self._until, prefixes):
            yield event

    async def subscribe_batches(self, after: int = 0, prefixes: Sequence[str] = ()) -> AsyncIterator[list[RecordedEvent]]:
        if events := self.read_all(after, self._until, prefixes):
            yield events

    def close(self) -> None:
        pass
