"""Many streams' events in one record of the log: a batch.

A writer that decides for thousands of small aggregates at once (the matcher: a schedule each)
appends one record per batch stream instead of one per event: each record costs a row, its index
entries and a version probe, whatever its size. The events keep their own streams and versions as
if each were appended alone ("virtual" streams, never written as such); `expand` gives them back,
so a reader folds and routes them exactly as before. A virtual stream's versions continue those of
a physical stream of the same name written before (an older log), and position order is kept: the
events of a batch share its position, after everything before it.

The record's data is JSON, `{"events": [...], "index": [[stream, version, type, start, end], ...]}`,
its events' own encodings copied in, so `expand` cuts them out by offset without parsing them and any
JSON tool reads the record whole. The index is found from the end: `],"index":` cannot occur inside an
encoded event's strings (their quotes are escaped).
"""
from __future__ import annotations

from typing import Container, Iterable, Iterator, Sequence

import orjson

from sluice.eventlog.port import EventLog, NewEvent, RecordedEvent

BATCH_TYPE = "Batch"
_HEAD = b'{"events":['
_INDEX = b'],"index":'


class MalformedBatch(ValueError):
    """A Batch record whose data is not what `batch` writes."""


def batch(batch_id: str, events: Sequence[tuple[str, int, str, bytes]]) -> NewEvent:
    """One record of (virtual stream, version, event type, encoded event), in order."""
    parts, index, offset = [], [], len(_HEAD)
    for stream, version, type_, data in events:
        index.append((stream, version, type_, offset, offset + len(data)))
        parts.append(data)
        offset += len(data) + 1
    return NewEvent(batch_id, BATCH_TYPE, _HEAD + b",".join(parts) + _INDEX + orjson.dumps(index) + b"}")


def batches(events: Sequence[tuple[str, int, str, bytes]], max_bytes: int) -> Iterator[list[tuple[str, int, str, bytes]]]:
    """The events cut into runs of at most `max_bytes` of encoded events each (one larger alone), in order:
    one record each, so that no decision however wide makes a record the log or a reader cannot take."""
    run: list[tuple[str, int, str, bytes]] = []
    size = 0
    for event in events:
        if run and size + len(event[3]) > max_bytes:
            yield run
            run, size = [], 0
        run.append(event)
        size += len(event[3])
    if run:
        yield run


def expand(recorded: RecordedEvent, types: Container[str] | None = None) -> list[RecordedEvent]:
    """The events of a Batch record, each as if read from its own stream (id `<batch id>/<n>`, the
    batch's position), only those of `types` when given; any other record as it is."""
    if recorded.type != BATCH_TYPE:
        return [recorded]
    data = bytes(recorded.data)
    marker = data.rfind(_INDEX)
    try:
        if marker < 0 or not data.startswith(_HEAD) or not data.endswith(b"}"):
            raise ValueError("not a batch")
        index = orjson.loads(data[marker + len(_INDEX):-1])
        if type(index) is not list or not all(type(entry) is list for entry in index):
            raise ValueError("its index is not a list of entries")
        return [RecordedEvent(f"{recorded.id}/{n}", stream, version, recorded.position, type_, data[start:end], {},
                              recorded.recorded_at)
                for n, (stream, version, type_, start, end) in enumerate(index) if types is None or type_ in types]
    except (ValueError, TypeError) as error:
        raise MalformedBatch(f"record {recorded.id} of stream {recorded.stream} at position {recorded.position}: "
                             f"not a batch of events ({error})") from None


def expand_all(records: Iterable[RecordedEvent]) -> list[RecordedEvent]:
    """`expand` of each record, in order."""
    return [event for record in records for event in expand(record)]


def paged(log: EventLog, stream: str, from_version: int, page: int) -> Iterator[RecordedEvent]:
    """The stream's records from `from_version` on, read `page` at a time: a batch stream's records are
    large, and a long one is not read into memory at once."""
    while records := log.read_stream(stream, from_version, page):
        yield from records
        from_version = records[-1].version + 1
