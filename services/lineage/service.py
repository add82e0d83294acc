"""The lineage service: records OpenLineage run events and keeps a disposable projection of them.

Each accepted event is appended, as received (canonical JSON), to the stream `lineage-run-<runId>`
under an id derived from (runId, eventType, eventTime), so a redelivery is recognised both by the
projection and, if the projection was not rebuilt yet, by the log's unique event ids.

The projection is snapshotted (sluice.runtime.snapshots) every SNAPSHOT_EVERY events, or as many
as it has runs if more: a restart loads the snapshot and folds only the log after it. Folding an
event twice changes nothing, so before a snapshot the log is read up to its head and whatever
another writer recorded meanwhile is folded too.
"""
from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any

from sluice.clock import Clock
from sluice.domain.bounds import lone_surrogate_error
from sluice.domain.lineage import (EMPTY, InvalidRunEvent, LineageState, RunEventRecord, evolve,
                                   parse_run_event)
from sluice.domain.lineage_index import LineageIndex
from sluice.eventlog.codec import DECODING_ERRORS, UndecodableEvent
from sluice.eventlog.port import ANY_VERSION, DuplicateEventId, EventLog, NewEvent
from sluice.ids import derived_id
from sluice.runtime.errors import MalformedMessage
from sluice.runtime.heap import built_then_frozen
from sluice.runtime.snapshots import SNAPSHOT_EVERY, Schema, Snapshots
from sluice_services.catalogue import LINEAGE
from sluice_services.lineage.snapshot import ColumnsUnusable, LineageColumns, columns, run_facts

log = logging.getLogger(__name__)

EVENT_TYPE = "LineageEventRecorded"
SNAPSHOT, = LINEAGE.snapshots
SNAPSHOT_VERSION = 3
"""The schema version of the lineage snapshot (every run's RunFacts as columns, snapshot.LineageColumns;
the index is derived from them when loaded): bump it when the columns or RunFacts change shape.
1: a dict of RunFacts by run id (decoding it took twice as long as deriving the index); 2: the integer
columns as lists (the codec checked each integer)."""
_READ_BATCH = 10_000
LONG_READ = 100_000
"""Log positions a recovery read past (the other services' events) after which it saves a snapshot even
when it found few lineage events: the next start reads from there."""


STREAM_PREFIX = "lineage-run-"


def stream_name(run_id: str) -> str:
    return STREAM_PREFIX + run_id


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
    except ValueError as exc:  # e.g. an integer past Python's digit limit for int()
        raise MalformedMessage(f"lineage event: unusable JSON ({exc})") from exc
    if (unicode_error := lone_surrogate_error(value, obj)) is not None:
        raise MalformedMessage(f"lineage event: {unicode_error}")
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
        self._position = 0              # every lineage event recorded up to this log position is folded
        self._unsaved = 0               # events folded since the last snapshot
        self._snapshots = Snapshots(log, SNAPSHOT, Schema(LineageColumns, SNAPSHOT_VERSION))

    @property
    def state(self) -> LineageState:
        return self._state

    def events_of(self, run_id: str) -> list[dict[str, Any]]:
        """The run events recorded for this run, as received, in the order recorded (one stream read)."""
        return [json.loads(recorded.data) for recorded in self._log.read_stream(stream_name(run_id))
                if recorded.type == EVENT_TYPE]

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
        self._unsaved += 1
        if self._unsaved >= max(SNAPSHOT_EVERY, len(self._state.facts)):
            self.save_snapshot()

    def recover(self) -> None:
        """The last usable snapshot and the log after it; the whole log when there is none."""
        with built_then_frozen():  # nothing folded is garbage
            self._state, self._position = self._loaded()
            loaded_at = self._position
            self._unsaved = self._fold_tail()
        if self._unsaved >= SNAPSHOT_EVERY or self._position - loaded_at >= LONG_READ:
            self.save_snapshot()

    def _loaded(self) -> tuple[LineageState, int]:
        """The state and position of the last usable snapshot; (EMPTY, 0) without one."""
        loaded = self._snapshots.load()
        if loaded is None:
            return EMPTY, 0
        position, saved = loaded
        try:
            facts = run_facts(saved)
        except ColumnsUnusable as error:
            log.warning("snapshot %s at position %s is unusable (%s): folding the whole log", SNAPSHOT, position, error)
            return EMPTY, 0
        return (LineageState(LineageIndex.from_facts(facts)) if facts else EMPTY), position

    def rebuild(self) -> None:
        """Drop the projection, refold every recorded lineage event from the log, snapshot the result."""
        with built_then_frozen():
            self._state, self._position = EMPTY, 0
            self._unsaved = self._fold_tail()
        self.save_snapshot()

    def save_snapshot(self) -> bool:
        self._fold_tail()
        saved = self._snapshots.save(self._position, columns(self._state.facts))
        if saved:
            self._unsaved = 0
        return saved

    def _fold_tail(self) -> int:
        """Fold the lineage events recorded after the position reached (reading only the lineage
        streams: the others' events are never fetched); how many there were."""
        folded = 0
        head = self._log.head_position()  # every event up to it is committed: read past it, all are folded
        while batch := self._log.read_all(after=self._position, limit=_READ_BATCH, prefixes=(STREAM_PREFIX,)):
            for recorded in batch:
                if recorded.type == EVENT_TYPE:
                    try:
                        record = parse_run_event(json.loads(recorded.data))
                    except DECODING_ERRORS as error:  # InvalidRunEvent is a ValueError
                        raise UndecodableEvent(recorded, error) from error
                    self._state = evolve(self._state, record)
                    folded += 1
            self._position = batch[-1].position
        self._position = max(self._position, head)
        return folded

