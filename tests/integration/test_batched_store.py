"""An aggregate store written through batch streams (sluice.eventlog.batched): each event folds into
its virtual stream, at recovery, after another writer's append and across snapshots, as if every
virtual stream were a stream of its own."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from sluice.clock import SystemClock
from sluice.eventlog.batched import batch
from sluice.eventlog.codec import dumps, encode
from sluice.eventlog.port import NO_STREAM, StreamAppend, WrongExpectedVersion
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.runtime import aggregates
from sluice.runtime.aggregates import AggregateStore, catch_up
from sluice.runtime.map_snapshots import snapshots_written
from tests.support.toy_aggregate import TYPES, Added, evolve

CLOCK = SystemClock()
T0 = datetime(2026, 11, 27, tzinfo=timezone.utc)
BATCHES = "agg-batch-"


def new_store(log: SqliteEventLog, snapshot: str | None = None) -> AggregateStore[tuple]:
    return AggregateStore(log, TYPES, evolve, (), clock=CLOCK, snapshot=snapshot, snapshot_every=10**9,
                          batch_prefix=BATCHES)


def append(store: AggregateStore[tuple], log: SqliteEventLog, batch_stream: str, values: dict[str, list[int]]) -> None:
    """What a writer through batches does: one record, its streams' next versions, the states put after."""
    entries, after = [], {}
    for stream, added in values.items():
        loaded = store.load(stream)
        state = loaded.state
        for offset, value in enumerate(added, start=1):
            entries.append((stream, loaded.version + offset, Added(value)))
            state = evolve(state, Added(value))
        after[stream] = (state, loaded.version + len(added))
    expected = store.load(batch_stream).version
    batch_id = f"{batch_stream}-{expected + 1}"
    (version,) = log.append_batch([StreamAppend(batch_stream, [batch(batch_id, [
        (stream, event_version, "Added", dumps(event)) for stream, event_version, event in entries])], expected)])
    for stream, (state, stream_version) in after.items():
        store.put(stream, state, stream_version)
    store.put(batch_stream, (), version)


def recovered(log: SqliteEventLog, snapshot: str | None = None) -> dict[str, tuple]:
    store = new_store(log, snapshot)
    catch_up(log, store, "agg-", TYPES)
    return store.states()


def test_recovery_folds_each_event_into_its_stream_after_that_stream_s_own_older_events(tmp_path):
    log = SqliteEventLog(tmp_path / "events.db")
    store = new_store(log)
    # an older log: a stream written on its own first
    log.append_batch([StreamAppend("agg-a", [encode(Added(1), "old-1"), encode(Added(2), "old-2")], NO_STREAM)])
    catch_up(log, store, "agg-", TYPES)
    append(store, log, BATCHES + "0", {"agg-a": [3], "agg-b": [10, 11]})
    append(store, log, BATCHES + "1", {"agg-c": [20]})
    append(store, log, BATCHES + "0", {"agg-b": [12], "agg-a": [4]})

    assert store.load("agg-a").version == 3 and store.load("agg-b").version == 2
    assert recovered(log) == store.states() == {"agg-a": (1, 2, 3, 4), "agg-b": (10, 11, 12), "agg-c": (20,)}
    assert "agg-batch-0" not in store.states() and store.load(BATCHES + "0").version == 1


def test_a_writer_that_lost_a_conflict_reads_the_winner_s_batch_into_its_streams(tmp_path):
    log = SqliteEventLog(tmp_path / "events.db")
    winner, loser = new_store(log), new_store(log)
    append(winner, log, BATCHES + "0", {"agg-a": [1]})
    append(loser, log, BATCHES + "1", {"agg-z": [9]})
    assert loser.load(BATCHES + "0").version == 0  # a first load reads the stream
    assert loser.load("agg-a") == winner.load("agg-a")

    append(winner, log, BATCHES + "0", {"agg-a": [2], "agg-b": [5]})
    with pytest.raises(WrongExpectedVersion) as conflict:
        append(loser, log, BATCHES + "0", {"agg-a": [3]})
    assert loser.load("agg-a").state == (1,)  # nothing kept of the refused append
    loser.follow_batch(conflict.value.stream)
    assert loser.load("agg-a").state == (1, 2) and loser.load("agg-b").state == (5,)
    append(loser, log, BATCHES + "0", {"agg-a": [3]})
    assert recovered(log) == {"agg-a": (1, 2, 3), "agg-b": (5,), "agg-z": (9,)}


def test_a_snapshot_keeps_the_batch_streams_versions_and_recovery_reads_only_after_it(tmp_path):
    log = SqliteEventLog(tmp_path / "events.db")
    store = new_store(log, "agg")
    catch_up(log, store, "agg-", TYPES)
    append(store, log, BATCHES + "0", {"agg-a": [1], "agg-b": [2]})
    store.snapshot()
    append(store, log, BATCHES + "0", {"agg-a": [3]})

    restored = new_store(log, "agg")
    position = restored.restore()
    assert position > 0 and restored.load(BATCHES + "0").version >= 0
    assert recovered(log, "agg") == recovered(log) == {"agg-a": (1, 3), "agg-b": (2,)}


def test_a_snapshot_taken_between_a_batch_s_streams_and_its_own_version_loses_nothing(tmp_path):
    """The writer puts the streams first and the batch stream's version last: a snapshot in between
    holds the batch stream at its old version, and recovery reads that batch again."""
    log = SqliteEventLog(tmp_path / "events.db")
    store = new_store(log, "agg")
    catch_up(log, store, "agg-", TYPES)
    append(store, log, BATCHES + "0", {"agg-a": [1]})
    put = store.put

    def snapshot_before_the_batch_stream(stream, state, version):
        if stream.startswith(BATCHES):
            store.snapshot()
        put(stream, state, version)
    store.put = snapshot_before_the_batch_stream
    append(store, log, BATCHES + "0", {"agg-a": [2], "agg-b": [3]})
    store.put = put
    append(store, log, BATCHES + "0", {"agg-b": [4]})

    assert recovered(log, "agg") == recovered(log) == store.states() == {"agg-a": (1, 2), "agg-b": (3, 4)}


async def test_a_snapshot_written_in_the_background_takes_the_batches_appended_meanwhile(tmp_path, monkeypatch):
    monkeypatch.setattr(aggregates, "BACKGROUND_SNAPSHOT_STREAMS", 2)
    log = SqliteEventLog(tmp_path / "events.db")
    store = new_store(log, "agg")
    catch_up(log, store, "agg-", TYPES)
    append(store, log, BATCHES + "0", {"agg-a": [1], "agg-b": [2], "agg-c": [3]})
    other = new_store(log)  # another writer's batch, which this store has not read
    catch_up(log, other, "agg-", TYPES)
    append(other, log, BATCHES + "1", {"agg-d": [4]})
    store.snapshot()  # in the worker thread: the states taken now, the log read there up to its head
    append(store, log, BATCHES + "0", {"agg-a": [5]})
    await snapshots_written()

    _, entries = store._snapshots.load()
    assert entries["agg-d"].state == (4,)  # read from the log in the worker thread
    assert entries["agg-a"].state in ((1,), (1, 5))  # the append after it may have committed before the read
    assert recovered(log, "agg") == recovered(log) == {"agg-a": (1, 5), "agg-b": (2,), "agg-c": (3,), "agg-d": (4,)}


def test_batch_streams_are_read_a_page_of_records_at_a_time(tmp_path, monkeypatch):
    monkeypatch.setattr(aggregates, "BATCH_RECORDS_READ", 1)
    log = SqliteEventLog(tmp_path / "events.db")
    writer, follower = new_store(log), new_store(log)
    assert follower.load(BATCHES + "0").version == NO_STREAM
    for value in range(5):
        append(writer, log, BATCHES + "0", {"agg-a": [value], f"agg-{value}": [value]})
    follower.follow_batch(BATCHES + "0")
    assert follower.states() == writer.states() == recovered(log)
    assert follower.load("agg-a").state == (0, 1, 2, 3, 4) and follower.load(BATCHES + "0").version == 4
