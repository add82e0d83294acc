"""The log's in-memory tail for its subscribers (sluice.eventlog.subscription.Tail) is bounded in bytes
as well as in events: a batch record holds hundreds of events' data."""
from __future__ import annotations

from datetime import datetime, timezone

from sluice.eventlog.port import RecordedEvent
from sluice.eventlog.subscription import Tail

AT = datetime(2026, 11, 27, tzinfo=timezone.utc)


def event(position: int, size: int) -> RecordedEvent:
    return RecordedEvent(f"e{position}", "s", position - 1, position, "T", b"x" * size, {}, AT)


def test_the_oldest_events_go_once_their_data_passes_the_bound():
    tail = Tail(capacity=1000, max_bytes=1000)
    for position in range(1, 10):
        tail.record([event(position, 100)])
    assert tail.read(0, 100, ()) is not None  # 900 bytes: all kept
    tail.record([event(10, 100), event(11, 100)])  # 1,100: trimmed to three quarters of the bound
    assert tail.read(0, 100, ()) is None  # the oldest are gone: a reader there reads the log
    kept, last, caught_up = tail.read(4, 100, ())
    assert [e.position for e in kept] == list(range(5, 12)) and last == 11 and caught_up


def test_a_record_larger_than_the_bound_is_not_kept():
    tail = Tail(capacity=1000, max_bytes=1000)
    tail.record([event(1, 10)])
    tail.record([event(2, 5000)])
    assert tail.read(0, 100, ()) is None and tail.read(1, 100, ()) is None
    tail.record([event(3, 10)])
    assert [e.position for e in tail.read(2, 100, ())[0]] == [3]
