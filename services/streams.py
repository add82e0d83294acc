"""A stream as its readers know it, also when its events are appended through a batch stream
(sluice.eventlog.batched): a schedule's matcher stream lives in its matches partition's batches,
after the events an older log wrote to the stream itself. What `sluice log show` and the console's
event-log page read."""
from __future__ import annotations

from sluice.domain import matching
from sluice.eventlog.batched import expand, paged
from sluice.eventlog.port import EventLog, RecordedEvent
from sluice.runtime.aggregates import BATCH_RECORDS_READ
from sluice_services.matcher.decisions import PARTITION_STREAM_PREFIX, partition_stream

_MATCHER_PREFIX = "matcher-"


def batch_stream_of(stream: str) -> str | None:
    """The batch stream a virtual stream's events are appended to, or None (a stream of its own)."""
    if stream.startswith(_MATCHER_PREFIX) and not stream.startswith(PARTITION_STREAM_PREFIX):
        return partition_stream(stream.removeprefix(_MATCHER_PREFIX))
    return None


def read_stream(log: EventLog, stream: str, from_version: int = 0, limit: int | None = None) -> list[RecordedEvent]:
    """The stream's events from `from_version` on, in version order (at most `limit`). A virtual
    stream's are found by reading its batch stream, a page of records at a time, until `limit`."""
    events = log.read_stream(stream, from_version, limit)
    batch_stream = batch_stream_of(stream)
    if batch_stream is None or (limit is not None and len(events) >= limit):
        return events
    for record in paged(log, batch_stream, 0, BATCH_RECORDS_READ):
        events += [event for event in expand(record) if event.stream == stream and event.version >= from_version]
        if limit is not None and len(events) >= limit:
            break
    return events if limit is None else events[:limit]


def schedule_recorded(log: EventLog, schedule_id: str) -> bool:
    """Whether the matcher's log holds the schedule (what a test or the demo waits for once it is created)."""
    return bool(read_stream(log, matching.stream_name(schedule_id), limit=1))
