"""Snapshot packing (msgpack by the state's declared type) unpacks to equal values, builds nothing but
the declared type from any bytes, keeps what it packs as small as before, and is paced."""
from __future__ import annotations

import asyncio
import gc
import hashlib
import struct
import threading
import time
import tracemalloc
import zlib
from datetime import datetime, timezone
from typing import Any
from zoneinfo import ZoneInfo

import msgspec
import pytest

from sluice.domain.common import Notification, PartitionCommitted, PartitionRef, ProgramRef
from sluice.domain.matching import MatcherState, PendingJob
from sluice.domain.schedules import Schedule
from sluice.domain.triggers import AndTrigger, PartitionTrigger
from sluice.domain.triggers.state import start
from sluice.runtime import snapshots
from sluice.runtime.snapshots import Schema, SnapshotUnusable, unpack

T0 = datetime(2026, 11, 23, tzinfo=timezone.utc)
STATES = Schema(list[MatcherState], 1)
ENTRIES = Schema(dict[str, MatcherState], 1)
NAME = "test"


def pack(state, schema: Schema = STATES, pace=None) -> bytes:
    return snapshots.pack(state, schema, NAME, pace)


def unpacked(data: bytes, schema: Schema = STATES):
    return unpack(data, schema, NAME)


def states(count: int) -> list[MatcherState]:
    found = []
    for index in range(count):
        trigger = AndTrigger((PartitionTrigger("ns", f"d{index}", 2), PartitionTrigger("ns", "other")))
        schedule = Schedule(f"s-{index}", f"s{index}", ProgramRef("ns", "app", "p"), trigger,
                            properties={"k": str(index)}, enabled=True)
        pending = PendingJob(f"job-{index}", T0, start(trigger, T0), 1)
        found.append(MatcherState(schedule, pending, 1, 0, b"12345678"))
    return found


def frames(data: bytes) -> list:
    """The snapshot's frames, decoded as plain msgpack."""
    body, found = zlib.decompress(data[32:]), []
    while body:
        (length,) = struct.unpack(">I", body[:4])
        found.append(msgspec.msgpack.decode(body[4:4 + length]))
        body = body[4 + length:]
    return found


def snapshot_of(*plain: object) -> bytes:
    """Well-formed snapshot bytes (checksum, zlib, frames) holding whatever plain data is given."""
    body = zlib.compress(b"".join(struct.pack(">I", len(f)) + f for f in map(msgspec.msgpack.encode, plain)))
    return hashlib.sha256(body).digest() + body


def test_packed_states_unpack_equal():
    packed = states(50)
    assert unpacked(pack(packed)) == packed


def test_packing_does_not_grow_the_objects_it_packs():
    """Reading fields must not make CPython build and keep a `__dict__` on every object packed (as
    pickle's default reduce did): a snapshot would then cost memory for as long as its objects live."""
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
    schema = Schema(tuple[Notification, datetime], 1)
    assert unpacked(pack((notification, T0), schema), schema) == (notification, T0)


def test_a_datetime_keeps_its_zone_and_fold():
    paris = datetime(2026, 10, 25, 2, 30, tzinfo=ZoneInfo("Europe/Paris"), fold=1)  # the second 02:30
    schema = Schema(tuple[datetime, ...], 1)
    values = (paris, T0, datetime(2026, 1, 1), T0.astimezone(timezone.max))
    restored = unpacked(pack(values, schema), schema)
    assert restored == values and [v.tzinfo for v in restored] == [v.tzinfo for v in values]
    assert restored[0].fold == 1 and restored[0].utcoffset() == paris.utcoffset()


@pytest.mark.parametrize("count", [3, 3 * snapshots.RAW_FROM])  # few, and items encoded one by one
def test_a_shared_object_is_shared_again_after_unpacking(count):
    """Notifications held by many pending jobs are one object in memory, and again after a restore."""
    one, *others = states(3)
    held = [one, *others] * (count // 3)
    restored = unpacked(pack(held))
    assert restored == held and all(state is restored[0] for state in restored[::3])


@pytest.mark.parametrize("plain", [
    ([snapshots.FORMAT, NAME, 1, 0], ["not", "a", "state"]),  # strings, not states
    ([snapshots.FORMAT, NAME, 1, 0], [7]),  # a reference to a state never read
    ([snapshots.FORMAT, NAME, 1, 0], [[None, None, 0, 0, b"", "extra"]]),  # a field too many
    ([snapshots.FORMAT, NAME, 2, 0], []),  # another version
    ([snapshots.FORMAT, "other", 1, 0], []),  # another snapshot's
    (["pickle-1", NAME, 1, 0], []),  # another format
    ([snapshots.FORMAT, NAME, 1, 0],),  # the state missing
    ([snapshots.FORMAT, NAME, 1, 0], [], []),  # something after it
])
def test_bytes_that_are_not_this_state_are_unusable(plain):
    with pytest.raises(SnapshotUnusable):
        unpacked(snapshot_of(*plain))
    assert unpacked(snapshot_of([snapshots.FORMAT, NAME, 1, 0], [])) == []  # the same, well-formed


def test_a_field_of_another_type_is_unusable():
    header, plain = frames(pack(states(1)))
    plain[0][2] = "not a number"  # jobs_created
    with pytest.raises(SnapshotUnusable):
        unpacked(snapshot_of(header, plain))


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_paused_while_packing_and_left_as_it_was(enabled):
    seen = []
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        pack(states(snapshots.YIELD_EVERY), pace=lambda: seen.append(gc.isenabled()))
        assert seen and not any(seen) and gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_packing_releases_the_gil_every_few_dozen_dataclasses(monkeypatch):
    releases = []
    monkeypatch.setattr(snapshots.time, "sleep", releases.append)
    pack(states(snapshots.YIELD_EVERY))  # several dataclasses each: more than YIELD_EVERY encoded
    assert releases and set(releases) == {0}


def packing_paced_by_the_loop(state: Any) -> tuple[asyncio.Future, list[float]]:
    """`pack(state)` on a worker thread, paced by the running loop; the times its chunks began."""
    loop = asyncio.get_running_loop()
    pacer = snapshots.LoopPacer(loop)
    chunks: list[float] = []

    def pace() -> None:
        chunks.append(time.perf_counter())
        pacer()

    return loop.run_in_executor(None, pack, state, STATES, pace), chunks


async def test_a_paced_packer_packs_a_chunk_per_turn_of_the_event_loop():
    """While the loop does not turn (a blocking call on it), the packer on its thread waits; once it
    turns again, the packing goes on to the end."""
    state = states(32 * snapshots.YIELD_EVERY)  # ~100 ms of packing
    packing, chunks = packing_paced_by_the_loop(state)
    while len(chunks) < 3:  # turns: the packer goes on
        await asyncio.sleep(0.001)
    assert not packing.done()
    blocked_from = time.perf_counter()
    time.sleep(0.05)  # no turn for 50 ms: at most the chunk under way
    assert sum(1 for at in chunks if at > blocked_from + 0.005) <= 1
    assert unpacked(await packing) == state


async def test_a_loop_busy_for_long_gets_one_chunk_per_max_turn_wait_not_an_unpaced_packer(monkeypatch):
    """A burst of work that holds the loop for many MAX_TURN_WAITs (a minute's timers) is not slowed by
    the snapshot taking the GIL: the packer goes on one chunk per MAX_TURN_WAIT, and at full pace again
    once the loop turns."""
    monkeypatch.setattr(snapshots, "MAX_TURN_WAIT", 0.02)
    state = states(32 * snapshots.YIELD_EVERY)  # ~100 ms of packing
    packing, chunks = packing_paced_by_the_loop(state)
    while len(chunks) < 2:
        await asyncio.sleep(0.001)
    blocked_from = time.perf_counter()
    time.sleep(0.2)  # ten MAX_TURN_WAITs without a turn
    blocked = time.perf_counter() - blocked_from
    during = sum(1 for at in chunks if at > blocked_from)
    assert 1 <= during <= blocked / snapshots.MAX_TURN_WAIT + 2
    assert not packing.done()
    assert unpacked(await packing) == state


class _RecordingTurn(threading.Event):
    def __init__(self, waits: list[float]) -> None:
        super().__init__()
        self.waits = waits

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        return super().wait(timeout)


def test_a_packer_paced_by_a_loop_that_is_not_running_goes_on_alone():
    loop = asyncio.new_event_loop()
    try:
        pacer = snapshots.LoopPacer(loop)
        waits: list[float] = []
        pacer._turn = _RecordingTurn(waits)
        state = states(2 * snapshots.YIELD_EVERY)
        assert unpacked(pack(state, pace=pacer)) == state
        assert waits == []  # it never waited for a turn
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
    packings = []
    original = snapshots.Packing

    def counting(pace):
        packings.append(original(pace))
        return packings[-1]

    monkeypatch.setattr(snapshots, "Packing", counting)
    data = pack(entries, ENTRIES)
    restored = unpacked(data, ENTRIES)
    assert restored == entries and list(restored) == list(entries)
    header, *parts = frames(data)
    assert header == [snapshots.FORMAT, NAME, 1, 3] and [len(part) // 2 for part in parts] == [100, 100, 50]
    memos = [len(packing.memo) for packing in packings]  # each part its own memo, freed with it
    assert len(memos) == 3 and memos[0] == memos[1] > memos[2] > 0
    small = {key: entries[key] for key in list(entries)[:100]}
    assert len(frames(pack(small, ENTRIES))) == 2  # up to PART_ENTRIES: one frame
    assert unpacked(pack(small, ENTRIES), ENTRIES) == small


def test_a_part_that_is_not_a_dict_makes_the_snapshot_unusable():
    with pytest.raises(SnapshotUnusable):
        unpacked(snapshot_of([snapshots.FORMAT, NAME, 1, 2], [0], ["not", "a", "dict"]), ENTRIES)


def test_format_name_and_version_are_the_stored_schema():
    assert Schema(MatcherState, 3).id("matcher") == f"{snapshots.FORMAT}:matcher:3"
