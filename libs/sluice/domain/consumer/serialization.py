"""A consumer's state as readable JSON and as compact bytes (seed 004: toBytes() and toJson()).

    document = state_to_json(state)          # plain dict, what `sluice consumer show` prints
    state_from_json(document)                # ConsumerStateError naming the bad field, e.g. working_set[3].status
    data = state_to_bytes(state)             # b"SLCS" + format version + zlib(compact JSON)
    state_from_bytes(data)                   # ConsumerStateError for anything that is not an intact state

The bytes are the JSON document without white space, deflated: keys, base locations and metadata
repeat from partition to partition and compress well (typically 10-20x smaller than the JSON),
and zlib's checksum catches a damaged copy. Snapshots of consumers in the event log use them.
"""
from __future__ import annotations

import json
import zlib
from datetime import datetime
from typing import Any, Callable, TypeVar

from sluice.domain.consumer.state import (
    ConsumerConfig,
    ConsumerRef,
    ConsumerState,
    HistoryRecord,
    Outcome,
    PartitionId,
    WorkItem,
    WorkStatus,
)
from sluice.domain.datasets.filters import KeyCondition, MetadataCondition, PartitionFilter
from sluice.domain.datasets.specs import Partition

FORMAT = "sluice.consumer-state"
FORMAT_VERSION = 1
MAGIC = b"SLCS"
MAX_BYTES = 256 * 1024 * 1024
"""A larger document is refused before inflating it (a zip bomb is not a consumer state)."""

T = TypeVar("T")


class ConsumerStateError(ValueError):
    """The bytes or JSON are not an intact consumer state; the message names the field or the damage."""


def state_to_bytes(state: ConsumerState) -> bytes:
    text = json.dumps(state_to_json(state), separators=(",", ":"), ensure_ascii=False)
    return MAGIC + bytes([FORMAT_VERSION]) + zlib.compress(text.encode(), 6)


def state_from_bytes(data: bytes) -> ConsumerState:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ConsumerStateError(f"consumer state: expected bytes, got {type(data).__name__}")
    data = bytes(data)
    if data[:4] != MAGIC:
        raise ConsumerStateError("consumer state: not a Sluice consumer state (bad magic bytes)")
    if len(data) < 6:
        raise ConsumerStateError("consumer state: corrupt (truncated)")
    if data[4] != FORMAT_VERSION:
        raise ConsumerStateError(f"consumer state: format version {data[4]} is not supported "
                                 f"(this Sluice reads version {FORMAT_VERSION})")
    try:
        inflater = zlib.decompressobj()
        text = inflater.decompress(data[5:], MAX_BYTES)
        if inflater.unconsumed_tail or not inflater.eof:
            raise ConsumerStateError("consumer state: corrupt (truncated, or larger than 256 MiB inflated)")
        document = json.loads(text)
    except (zlib.error, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ConsumerStateError(f"consumer state: corrupt ({error})") from None
    return state_from_json(document)


# -- to JSON --------------------------------------------------------------------------------------

def state_to_json(state: ConsumerState) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "consumer": {"namespace": state.consumer.namespace, "dataset": state.consumer.dataset,
                     "name": state.consumer.name},
        "config": _config_to_json(state.config),
        "high_water_mark": state.high_water_mark,
        "in_flight": list(state.in_flight),
        "working_set": [_item_to_json(item) for item in state.working_set],
        "history": [_record_to_json(record) for record in state.history],
    }


def _config_to_json(config: ConsumerConfig) -> dict[str, Any]:
    return {
        "max_working_set": config.max_working_set, "max_retries": config.max_retries,
        "timeout_seconds": config.timeout_seconds, "start": _time(config.start), "end": _time(config.end),
        "where": {"keys": [{"name": c.name, "one_of": list(c.one_of), "lower": c.lower, "upper": c.upper}
                           for c in config.where.keys],
                  "metadata": [{"name": c.name, "one_of": list(c.one_of)} for c in config.where.metadata]},
        "history_size": config.history_size,
    }


def _item_to_json(item: WorkItem) -> dict[str, Any]:
    p = item.partition
    return {"id": str(item.id), "status": item.status.value, "failures": item.failures,
            "taken_by": item.taken_by, "taken_at": _time(item.taken_at), "committed_at": _time(item.committed_at),
            "key": dict(p.key), "location": p.location, "size_bytes": p.size_bytes, "record_count": p.record_count,
            "metadata": dict(p.metadata)}


def _record_to_json(record: HistoryRecord) -> dict[str, Any]:
    return {"id": str(record.id), "key": dict(record.key), "outcome": record.outcome.value, "at": _time(record.at),
            "taken_by": record.taken_by, "failures": record.failures}


def _time(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat()


# -- from JSON ------------------------------------------------------------------------------------

def state_from_json(document: Any) -> ConsumerState:
    """Every field checked; ConsumerStateError("consumer state: working_set[2].failures: ...") otherwise."""
    d = _Reader(document, "")
    if d.get("format", str) != FORMAT:
        raise ConsumerStateError(f"consumer state: format: expected {FORMAT!r}")
    if d.get("version", int) != FORMAT_VERSION:
        raise ConsumerStateError(f"consumer state: version: only {FORMAT_VERSION} is supported")
    consumer = d.object("consumer")
    in_flight = tuple(d.each("in_flight", lambda value, path: _Reader.check(value, int, path)))
    if list(in_flight) != sorted(set(in_flight)):
        raise ConsumerStateError("consumer state: in_flight: must be ascending without repeats")
    high_water_mark = d.get("high_water_mark", int)
    if any(position >= high_water_mark or position < 0 for position in in_flight) or high_water_mark < 0:
        raise ConsumerStateError("consumer state: in_flight: positions must lie below high_water_mark")
    working_set = tuple(d.each("working_set", _item))
    if len({item.id for item in working_set}) != len(working_set):
        raise ConsumerStateError("consumer state: working_set: a partition is listed twice")
    return ConsumerState(
        ConsumerRef(consumer.get("namespace", str), consumer.get("dataset", str), consumer.get("name", str)),
        _config(d.object("config")), high_water_mark, in_flight,
        tuple(sorted(working_set, key=lambda item: item.id)), tuple(d.each("history", _record)))


def _config(d: _Reader) -> ConsumerConfig:
    where = d.object("where")
    return ConsumerConfig(
        max_working_set=d.get("max_working_set", int), max_retries=d.get("max_retries", int),
        timeout_seconds=d.get("timeout_seconds", int), start=d.when("start", optional=True),
        end=d.when("end", optional=True),
        where=PartitionFilter(
            tuple(where.each("keys", lambda v, p: _key_condition(_Reader(v, p)))),
            tuple(where.each("metadata", lambda v, p: _metadata_condition(_Reader(v, p))))),
        history_size=d.get("history_size", int))


def _key_condition(d: _Reader) -> KeyCondition:
    return KeyCondition(d.get("name", str), tuple(d.each("one_of", lambda v, p: _Reader.check(v, str, p))),
                        d.get("lower", str, optional=True), d.get("upper", str, optional=True))


def _metadata_condition(d: _Reader) -> MetadataCondition:
    return MetadataCondition(d.get("name", str), tuple(d.each("one_of", lambda v, p: _Reader.check(v, str, p))))


def _item(value: Any, path: str) -> WorkItem:
    d = _Reader(value, path)
    status = d.enum("status", WorkStatus)
    taken_at = d.when("taken_at", optional=True)
    if (status is WorkStatus.IN_PROGRESS) != (taken_at is not None):
        raise ConsumerStateError(f"consumer state: {path}.taken_at: set exactly when the status is IN_PROGRESS")
    failures = d.get("failures", int)
    if failures < 0:
        raise ConsumerStateError(f"consumer state: {path}.failures: must not be negative")
    partition = Partition(d.strings("key"), d.get("location", str), d.get("size_bytes", int),
                          d.get("record_count", int), d.strings("metadata"))
    return WorkItem(d.partition_id("id"), partition, d.when("committed_at"), status, failures,
                    d.get("taken_by", str), taken_at)


def _record(value: Any, path: str) -> HistoryRecord:
    d = _Reader(value, path)
    return HistoryRecord(d.partition_id("id"), d.strings("key"), d.enum("outcome", Outcome), d.when("at"),
                         d.get("taken_by", str), d.get("failures", int))


class _Reader:
    """Reads fields of one JSON object, naming the path of whatever is missing or mistyped."""

    def __init__(self, value: Any, path: str) -> None:
        self.value = self.check(value, dict, path or "document")
        self.path = path

    def field_path(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def get(self, name: str, kind: type[T], optional: bool = False) -> T:
        if name not in self.value:
            raise ConsumerStateError(f"consumer state: {self.field_path(name)}: missing")
        value = self.value[name]
        if value is None and optional:
            return None  # type: ignore[return-value]
        return self.check(value, kind, self.field_path(name))

    def object(self, name: str) -> _Reader:
        return _Reader(self.get(name, dict), self.field_path(name))

    def each(self, name: str, read: Callable[[Any, str], T]) -> list[T]:
        return [read(value, f"{self.field_path(name)}[{index}]") for index, value in enumerate(self.get(name, list))]

    def strings(self, name: str) -> dict[str, str]:
        mapping = self.get(name, dict)
        for key, value in mapping.items():
            self.check(value, str, f"{self.field_path(name)}.{key}")
        return dict(mapping)

    def when(self, name: str, optional: bool = False) -> datetime | None:
        text = self.get(name, str, optional)
        if text is None:
            return None
        try:
            value = datetime.fromisoformat(text)
        except ValueError:
            value = None
        if value is None or value.tzinfo is None:
            raise ConsumerStateError(f"consumer state: {self.field_path(name)}: not a time with a zone: {text!r}")
        return value

    def enum(self, name: str, kind: type[T]) -> T:
        text = self.get(name, str)
        try:
            return kind(text)  # type: ignore[call-arg]
        except ValueError:
            allowed = ", ".join(member.value for member in kind)  # type: ignore[attr-defined]
            raise ConsumerStateError(f"consumer state: {self.field_path(name)}: {text!r} is not one of {allowed}") \
                from None

    def partition_id(self, name: str) -> PartitionId:
        text = self.get(name, str)
        position, dot, index = text.partition(".")
        if not dot or not position.isdigit() or not index.isdigit():
            raise ConsumerStateError(f"consumer state: {self.field_path(name)}: not a POSITION.INDEX id: {text!r}")
        return PartitionId(int(position), int(index))

    @staticmethod
    def check(value: Any, kind: type[T], path: str) -> T:
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            names = {dict: "an object", list: "a list", str: "text", int: "a whole number"}
            raise ConsumerStateError(f"consumer state: {path}: must be {names.get(kind, kind.__name__)}, "
                                     f"got {type(value).__name__}")
        return value
