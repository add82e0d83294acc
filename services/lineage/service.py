"""The lineage service: records OpenLineage run events and keeps a disposable projection of them.

Each accepted event is appended, as received (canonical JSON), to the stream `lineage-run-<runId>`
under an id derived from (runId, eventType, eventTime), so a redelivery is recognised both by the
projection and, if the projection was not rebuilt yet, by the log's unique event ids.
"""
from __future__ import annotations

import gc
import json
from datetime import datetime
from typing import Any, Iterator

from sluice.clock import Clock
from sluice.domain.lineage import EMPTY, InvalidRunEvent, LineageState, RunEventRecord, evolve, fold, parse_run_event
from sluice.eventlog.port import ANY_VERSION, DuplicateEventId, EventLog, NewEvent, RecordedEvent
from sluice.ids import derived_id
from sluice.runtime.errors import MalformedMessage

EVENT_TYPE = "LineageEventRecorded"
_READ_BATCH = 1000


def stream_name(run_id: str) -> str:
    return f"lineage-run-{run_id}"


def event_id(record: RunEventRecord) -> str:
    run_id, event_type, event_time = record.key
    return derived_id("lineage", run_id, event_type, event_time.isoformat())


def canonical_json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decode_message(value: bytes) -> tuple[dict[str, Any], RunEventRecord]:
    """The JSON object and its parsed record; MalformedMessage (naming the field) if unusable."""
    try:
        obj = json.loads(value.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise MalformedMessage(f"lineage event: not UTF-8 ({exc.reason} at byte {exc.start})") from exc
    except json.JSONDecodeError as exc:
        raise MalformedMessage(f"lineage event: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from exc
    except RecursionError as exc:
        raise MalformedMessage("lineage event: JSON nested too deeply") from exc
    try:
        return obj, parse_run_event(obj)
    except InvalidRunEvent as exc:
        raise MalformedMessage(f"lineage event: invalid OpenLineage run event: {exc.field}: {exc.reason}") from exc


def recorded_event(obj: dict[str, Any], record: RunEventRecord, received_at: datetime) -> NewEvent:
    """The log event for one accepted run event: the event as received, keyed for deduplication."""
    return NewEvent(
        id=event_id(record),
        type=EVENT_TYPE,
        data=canonical_json(obj),
        metadata={
            "run_id": record.run_id,
            "event_type": record.event_type,
            "event_time": record.event_time.isoformat(),
            "received_at": received_at.isoformat(),
        },
    )


class LineageService:
    def __init__(self, log: EventLog, clock: Clock) -> None:
        self._log = log
        self._clock = clock
        self._state: LineageState = EMPTY

    @property
    def state(self) -> LineageState:
        return self._state

    def handle_message(self, value: bytes) -> None:
        """Record one OpenLineage run event (JSON). Raises MalformedMessage; a duplicate is a no-op."""
        obj, record = decode_message(value)
        if self._state.has_seen(record):
            return
        event = recorded_event(obj, record, self._clock.now())
        try:
            self._log.append(stream_name(record.run_id), [event], ANY_VERSION)
        except DuplicateEventId:
            return                  # recorded before this projection was built; rebuild() catches up
        self._state = evolve(self._state, record)

    def rebuild(self) -> None:
        """Drop the projection and refold every recorded lineage event from the log.

        The garbage collector is paused meanwhile: nothing folded is garbage, and its scans of a
        million-run heap would cost more than the fold. What was built is then frozen (out of
        reach of later collections, which would otherwise keep rescanning it)."""
        collecting = gc.isenabled()
        gc.disable()
        try:
            self._state = EMPTY
            self._state = fold(parse_run_event(json.loads(e.data)) for e in self._recorded())
        finally:
            if collecting:
                gc.enable()
            gc.freeze()

    def _recorded(self) -> Iterator[RecordedEvent]:
        after = 0
        while batch := self._log.read_all(after=after, limit=_READ_BATCH):
            yield from (e for e in batch if e.type == EVENT_TYPE)
            after = batch[-1].position
