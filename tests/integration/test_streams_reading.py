"""A schedule's matcher stream read as one stream (sluice_services.streams): the events an older
log wrote to the stream itself, then those in its partition's batches, in version order."""
from __future__ import annotations

from sluice.eventlog.batched import batch
from sluice.eventlog.port import NO_STREAM, NewEvent, StreamAppend
from sluice.eventlog.sqlite import SqliteEventLog
from sluice_services.matcher.decisions import partition_stream
from sluice_services.streams import read_stream, schedule_recorded


def test_a_schedule_s_stream_is_its_own_events_then_its_batched_ones(tmp_path):
    log = SqliteEventLog(tmp_path / "events.db")
    log.append_batch([StreamAppend("matcher-x", [NewEvent("o0", "ScheduleObserved", b"{}"),
                                                 NewEvent("o1", "JobCreated", b"{}")], NO_STREAM)])
    for number, versions in enumerate(([2], [3])):
        log.append_batch([StreamAppend(partition_stream("x"), [batch(f"b{number}", [
            ("matcher-x", version, "JobTriggered", b'{"v":%d}' % version) for version in versions])], number - 1)])
    assert partition_stream("y") != partition_stream("x")
    log.append_batch([StreamAppend(partition_stream("y"), [batch("by", [("matcher-y", 0, "ScheduleObserved", b"{}")])],
                                   NO_STREAM)])

    assert [e.version for e in read_stream(log, "matcher-x")] == [0, 1, 2, 3]
    assert [(e.version, e.data) for e in read_stream(log, "matcher-x", 1, 2)] == [(1, b"{}"), (2, b'{"v":2}')]
    assert [e.version for e in read_stream(log, "matcher-x", 3)] == [3]
    assert [(e.stream, e.version) for e in read_stream(log, "matcher-y")] == [("matcher-y", 0)]
    assert read_stream(log, "matcher-z") == [] and not schedule_recorded(log, "z")
    assert schedule_recorded(log, "x") and schedule_recorded(log, "y")
    assert [e.type for e in read_stream(log, partition_stream("x"))] == ["Batch", "Batch"]  # a stream of its own
    log.close()
