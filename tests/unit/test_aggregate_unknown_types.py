"""An event of a type this release does not know on a store's own stream (written by a newer release, then
rolled back) stops the fold with UndecodableEvent naming it: skipped, it left the state rebuilt from the
log silently wrong (and, in a batch stream's tail, every later event of its stream skipped too)."""
from __future__ import annotations

import pytest

from sluice.clock import SystemClock
from sluice.eventlog.batched import batch
from sluice.eventlog.codec import UndecodableEvent, dumps, encode
from sluice.eventlog.port import NO_STREAM, NewEvent, StreamAppend
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.runtime.aggregates import AggregateStore, catch_up
from tests.support.toy_aggregate import TYPES, Added, evolve

CLOCK = SystemClock()
BATCHES = "agg-batch-"
NEWER = ("Removed", b'{"value": 1}')
"""An event type of a newer release."""


@pytest.fixture
def log(tmp_path):
    log = SqliteEventLog(tmp_path / "events.db")
    yield log
    log.close()


def new_store(log: SqliteEventLog) -> AggregateStore[tuple]:
    return AggregateStore(log, TYPES, evolve, (), clock=CLOCK, batch_prefix=BATCHES)


def append_batch(log: SqliteEventLog, batch_stream: str, expected: int, entries: list[tuple[str, int, str, bytes]]) -> None:
    log.append_batch([StreamAppend(batch_stream, [batch(f"{batch_stream}-{expected + 1}", entries)], expected)])


def test_catch_up_refuses_an_unknown_type_on_a_stream_of_its_own(log):
    log.append("agg-a", [encode(Added(1), "e-1"), NewEvent("e-2", *NEWER), encode(Added(2), "e-3")], NO_STREAM)
    with pytest.raises(UndecodableEvent) as refused:
        catch_up(log, new_store(log), "agg-", TYPES)
    assert str(refused.value) == "stream agg-a version 1 at position 2: Removed: a type this release does not know"


def test_catch_up_refuses_an_unknown_type_in_a_batch_record(log):
    append_batch(log, BATCHES + "0", NO_STREAM, [("agg-a", 0, "Added", dumps(Added(1))), ("agg-b", 0, *NEWER),
                                                 ("agg-b", 1, "Added", dumps(Added(2)))])
    with pytest.raises(UndecodableEvent) as refused:
        catch_up(log, new_store(log), "agg-", TYPES)
    assert str(refused.value) == "stream agg-b version 0 at position 1: Removed: a type this release does not know"


def test_following_a_batch_stream_refuses_an_unknown_type_in_its_tail(log):
    """Another writer's batch, read after a conflict or at a first load (follow_batch)."""
    store = new_store(log)
    catch_up(log, store, "agg-", TYPES)
    append_batch(log, BATCHES + "0", NO_STREAM, [("agg-a", 0, "Added", dumps(Added(1)))])
    append_batch(log, BATCHES + "0", 0, [("agg-a", 1, *NEWER), ("agg-a", 2, "Added", dumps(Added(2)))])
    with pytest.raises(UndecodableEvent) as refused:
        store.follow_batch(BATCHES + "0")
    assert str(refused.value) == "stream agg-a version 1 at position 2: Removed: a type this release does not know"


def test_a_store_that_knows_every_type_folds_its_streams_and_batches_as_before(log):
    log.append("agg-a", [encode(Added(1), "e-1")], NO_STREAM)
    append_batch(log, BATCHES + "0", NO_STREAM, [("agg-a", 1, "Added", dumps(Added(2))),
                                                 ("agg-b", 0, "Added", dumps(Added(3)))])
    store = new_store(log)
    catch_up(log, store, "agg-", TYPES)
    append_batch(log, BATCHES + "0", 0, [("agg-b", 1, "Added", dumps(Added(4)))])
    store.follow_batch(BATCHES + "0")
    assert store.states() == {"agg-a": (1, 2), "agg-b": (3, 4)}
