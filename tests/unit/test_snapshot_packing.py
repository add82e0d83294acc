"""Snapshot packing keeps what it packs as small as before, and unpacks to equal values."""
from __future__ import annotations

import asyncio
import gc
import hashlib
import pickle
import time
import tracemalloc
import zlib
from datetime import datetime, timezone

import pytest

from sluice.domain.common import Notification, PartitionCommitted, PartitionRef, ProgramRef
from sluice.domain.matching import MatcherState, PendingJob
from sluice.domain.schedules import Schedule
from sluice.domain.triggers import AndTrigger, PartitionTrigger
from sluice.domain.triggers.state import start
from sluice.runtime import snapshots
from sluice.runtime.snapshots import SnapshotUnusable, pack, unpack

T0 = datetime(2026, 11, 23, tzinfo=timezone.utc)


def states(count: int) -> list[MatcherState]:
    found = []
    for index in range(count):
        trigger = AndTrigger((PartitionTrigger("ns", f"d{index}", 2), PartitionTrigger("ns", "other")))
        schedule = Schedule(f"s-{index}", f"s{index}", ProgramRef("ns", "app", "p"), trigger,
                            properties={"k": str(index)}, enabled=True)
        pending = PendingJob(f"job-{index}", T0, start(trigger, T0), 1)
        found.append(MatcherState(schedule, pending, 1, 0, b"12345678"))
    return found


def test_packed_states_unpack_equal():
    packed = states(50)
    assert unpack(pack(packed)) == packed


def test_packing_does_not_grow_the_objects_it_packs():
    """Pickle's default reduce reads `__dict__`, which makes CPython build and keep a dict on every
    object pickled: a snapshot then costs memory for as long as its objects live."""
    held = states(2000)
    gc.collect()
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        data = pack(held)
        del data
        gc.collect()
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (after - before) / len(held) < 16


def test_notifications_and_datetimes_survive_packing():
    notification = Notification("n-1", T0, PartitionCommitted("ns", "d", (PartitionRef({"h": "01"}, "/d/1", 10, 2),)))
    assert unpack(pack([notification, T0])) == [notification, T0]


def test_a_snapshot_naming_a_non_dataclass_is_unusable():
    class BuildsADict:
        def __reduce__(self):
            return snapshots._from_fields, (dict, ())

    compressed = zlib.compress(pickle.dumps(BuildsADict()))
    with pytest.raises(SnapshotUnusable):
        unpack(hashlib.sha256(compressed).digest() + compressed)


class _RecordsCollector:
    """Pickled through its __reduce__, which notes whether the cyclic collector was on meanwhile."""

    seen: list[bool] = []

    def __reduce__(self):
        _RecordsCollector.seen.append(gc.isenabled())
        return (dict, ())


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_paused_while_packing_and_left_as_it_was(enabled):
    _RecordsCollector.seen = []
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        pack([_RecordsCollector()])
        assert _RecordsCollector.seen == [False] and gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_packing_releases_the_gil_every_few_hundred_objects(monkeypatch):
    releases = []
    monkeypatch.setattr(snapshots.time, "sleep", releases.append)
    pack(states(snapshots.YIELD_EVERY))  # several dataclasses each: more than YIELD_EVERY objects reduced
    assert releases and set(releases) == {0}


async def test_a_paced_packer_packs_a_chunk_per_turn_of_the_event_loop():
    """While the loop does not turn (a blocking call on it), the packer on its thread waits; once it
    turns again, the packing goes on to the end."""
    loop = asyncio.get_running_loop()
    pacer = snapshots.LoopPacer(loop)
    chunks = []

    def pace() -> None:
        chunks.append(time.perf_counter())
        pacer()

    state = states(32 * snapshots.YIELD_EVERY)  # ~100 ms of packing
    packing = loop.run_in_executor(None, pack, state, pace)
    while len(chunks) < 3:  # turns: the packer goes on
        await asyncio.sleep(0.001)
    assert not packing.done()
    blocked_from = time.perf_counter()
    time.sleep(0.05)  # no turn for 50 ms: at most the chunk under way
    assert sum(1 for at in chunks if at > blocked_from + 0.005) <= 1
    assert unpack(await packing) == state


def test_a_packer_paced_by_a_loop_that_is_not_running_goes_on_alone():
    loop = asyncio.new_event_loop()
    try:
        started = time.perf_counter()
        state = states(2 * snapshots.YIELD_EVERY)
        assert unpack(pack(state, snapshots.LoopPacer(loop))) == state
        assert time.perf_counter() - started < snapshots.MAX_TURN_WAIT  # it never waited for a turn
    finally:
        loop.close()


def test_a_stopped_pacer_no_longer_waits_for_the_loop():
    loop = asyncio.new_event_loop()
    pacer = snapshots.LoopPacer(loop)
    pacer.stop()
    loop.is_running = lambda: True  # as if it ran, blocked on the thread that stopped the pacer
    started = time.perf_counter()
    pacer()
    assert time.perf_counter() - started < snapshots.MAX_TURN_WAIT
    del loop.is_running
    loop.close()


def test_a_big_dict_is_packed_in_parts_and_unpacks_whole(monkeypatch):
    monkeypatch.setattr(snapshots, "PART_ENTRIES", 100)
    entries = {f"matcher-s{index}": state for index, state in enumerate(states(250))}
    freed = []
    original = snapshots._FieldPickler

    class CountingPickler(original):
        def dump(self, obj):
            super().dump(obj)
            freed.append(len(self.memo.copy()))  # what freeing this pickler's memo costs

    monkeypatch.setattr(snapshots, "_FieldPickler", CountingPickler)
    restored = unpack(pack(entries))
    assert restored == entries and list(restored) == list(entries)
    assert len(freed) == 4 and max(freed) < sum(freed) / 2  # a marker, then parts of 100, 100, 50 entries
    small = {key: entries[key] for key in list(entries)[:100]}
    assert unpack(pack(small)) == small  # up to PART_ENTRIES: one pickle, as before


def test_a_part_that_is_not_a_dict_makes_the_snapshot_unusable():
    import io
    buffer = io.BytesIO()
    pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(snapshots._Parts(2))
    pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump({"a": 1})
    pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(["not", "a", "dict"])
    body = zlib.compress(buffer.getvalue(), 1)
    with pytest.raises(SnapshotUnusable):
        unpack(hashlib.sha256(body).digest() + body)


def test_the_packing_format_is_part_of_every_schema(monkeypatch):
    before = snapshots.schema_of(MatcherState)
    monkeypatch.setattr(snapshots, "PACK_FORMAT", b"another")
    assert snapshots.schema_of(MatcherState) != before
