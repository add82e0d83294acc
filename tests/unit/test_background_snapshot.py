"""A snapshot of many streams is packed and written off the event loop, and holds the states of
the moment it was taken; a small one is written at once."""
from __future__ import annotations

import asyncio
import threading
from datetime import datetime, timezone

from sluice.bus.inprocess import InProcessBus
from sluice.clock import SystemClock
from sluice.domain import matching
from sluice.eventlog.codec import EventTypes
from sluice.domain.common import ProgramRef
from sluice.domain.matching import MatcherState, ScheduleObserved
from sluice.domain.schedules import Schedule
from sluice.domain.triggers import PartitionTrigger
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.runtime import aggregates
from sluice.runtime.aggregates import AggregateStore
from sluice.runtime.map_snapshots import SNAPSHOT_WRITER, MapSnapshots
from sluice.runtime.service import ServiceSpec, run_services
from sluice.runtime.snapshots import Snapshots

CLOCK = SystemClock()
T0 = datetime(2026, 11, 23, tzinfo=timezone.utc)
TYPES = EventTypes(matching.EVENTS)


def store_with_streams(log: SqliteEventLog, count: int) -> AggregateStore[MatcherState]:
    store = AggregateStore(log, TYPES, matching.evolve, MatcherState(), clock=CLOCK, snapshot="test",
                           snapshot_every=10**9)
    for index in range(count):
        stream = f"matcher-s{index}"
        schedule = Schedule(f"s{index}", f"s{index}", ProgramRef("ns", "app", "p"), PartitionTrigger("ns", "d"))
        event = ScheduleObserved(schedule, T0)
        (version,) = log.append_batch([store.prepare(stream, [event])])
        store.put(stream, matching.evolve(MatcherState(), event), version)
    return store


def store_following(log: SqliteEventLog, count: int) -> AggregateStore[MatcherState]:
    """A store that follows the prefix of `count` streams another store wrote, caught up with them."""
    store_with_streams(log, count)
    store = AggregateStore(log, TYPES, matching.evolve, MatcherState(), clock=CLOCK, snapshot="test",
                           snapshot_every=10**9)
    aggregates.catch_up(log, store, "matcher-", TYPES)
    return store


async def test_many_streams_are_snapshotted_in_a_worker_thread(tmp_path, monkeypatch):
    monkeypatch.setattr(aggregates, "BACKGROUND_SNAPSHOT_STREAMS", 3)
    release, writers = threading.Event(), []
    original = Snapshots.save

    def slow_save(self, position, state, pace=None):
        writers.append(threading.current_thread())
        release.wait(10)
        return original(self, position, state, pace)

    monkeypatch.setattr(Snapshots, "save", slow_save)
    log = SqliteEventLog(tmp_path / "events.db")
    store = store_with_streams(log, 5)
    store.snapshot()  # returns while the save waits
    await asyncio.sleep(0.05)
    assert writers and writers[0] is not threading.main_thread()
    store.snapshot()  # one at a time: this one is skipped
    release.set()
    await store._saving
    assert len(writers) == 1
    position, streams = Snapshots(log, "test", store._snapshots.schema).load()
    assert sorted(streams) == [f"matcher-s{index}" for index in range(5)]
    log.close()


async def test_a_few_streams_are_snapshotted_at_once(tmp_path):
    log = SqliteEventLog(tmp_path / "events.db")
    store = store_with_streams(log, 2)
    store.snapshot()
    assert store._saving is None
    assert sorted(Snapshots(log, "test", store._snapshots.schema).load()[1]) == ["matcher-s0", "matcher-s1"]
    log.close()


async def test_a_background_snapshot_finds_what_other_writers_appended_off_the_loop(tmp_path, monkeypatch):
    """A store that follows a prefix reads which of its streams moved, and folds those, on the
    snapshot thread: another writer's event is in the snapshot, and in the store's cache from its next snapshot on."""
    monkeypatch.setattr(aggregates, "BACKGROUND_SNAPSHOT_STREAMS", 3)
    log = SqliteEventLog(tmp_path / "events.db")
    store = store_following(log, 5)
    # a member that took the stream over
    other = AggregateStore(log, TYPES, matching.evolve, MatcherState(), clock=CLOCK)
    updated = Schedule("s0", "s0", ProgramRef("ns", "app", "p"), PartitionTrigger("ns", "other"), generation=2)
    (version,) = log.append_batch([other.prepare("matcher-s0", [ScheduleObserved(updated, T0)])])
    readers = []
    versions = log.stream_versions
    monkeypatch.setattr(log, "stream_versions", lambda *a: readers.append(threading.current_thread()) or versions(*a))

    store.snapshot()
    await store._saving
    assert readers and threading.main_thread() not in readers
    assert store.load("matcher-s0").version == version - 1  # not yet taken: the loop did not wait for it
    position, entries = MapSnapshots(log, "test", store._snapshots.schema).load()
    assert position == log.head_position() and entries["matcher-s0"].state.schedule == updated
    restored = AggregateStore(log, TYPES, matching.evolve, MatcherState(), clock=CLOCK, snapshot="test")
    aggregates.catch_up(log, restored, "matcher-", TYPES)
    assert restored.load("matcher-s0").state.schedule == updated
    assert restored.states() == {**store.states(), "matcher-s0": restored.load("matcher-s0").state}

    store.snapshot()  # takes what the last one read first
    await store._saving
    assert store.load("matcher-s0") == restored.load("matcher-s0")
    log.close()


async def test_services_stopping_wait_for_the_snapshot_being_written_before_the_log_closes(tmp_path, monkeypatch):
    monkeypatch.setattr(aggregates, "BACKGROUND_SNAPSHOT_STREAMS", 3)
    release = threading.Event()
    original = Snapshots.save
    monkeypatch.setattr(Snapshots, "save", lambda self, *args: release.wait(10) and original(self, *args))
    log = SqliteEventLog(tmp_path / "events.db")
    store = store_with_streams(log, 5)
    stop, ready = asyncio.Event(), asyncio.Event()
    spec = ServiceSpec("holder", start=store.snapshot)  # the snapshot starts with the service
    services = asyncio.create_task(run_services([spec], InProcessBus(), log, stop=stop,
                                                on_ready=lambda port: ready.set(), refreeze_seconds=0))
    await asyncio.wait_for(ready.wait(), 10)
    stop.set()
    await asyncio.sleep(0.1)
    assert not services.done()  # waits for the snapshot
    release.set()
    await asyncio.wait_for(services, 10)
    log.close()  # what the caller does next: the snapshot is in
    reopened = SqliteEventLog(tmp_path / "events.db")
    assert len(Snapshots(reopened, "test", store._snapshots.schema).load()[1]) == 5
    reopened.close()


async def test_events_a_background_snapshot_caught_up_with_do_not_count_towards_the_next(tmp_path, monkeypatch):
    """A snapshot brings the streams that moved since it was taken up to the head it writes: those events
    are in it, and the next snapshot is due after as many new ones as ever, not sooner."""
    monkeypatch.setattr(aggregates, "BACKGROUND_SNAPSHOT_STREAMS", 3)
    log = SqliteEventLog(tmp_path / "events.db")
    store = store_following(log, 5)
    writer_busy = threading.Event()
    SNAPSHOT_WRITER.submit(writer_busy.wait, 10)  # the snapshot below starts on the writer after this

    def observe(index: int, generation: int) -> None:
        stream = f"matcher-s{index}"
        schedule = Schedule(f"s{index}", f"s{index}", ProgramRef("ns", "app", "p"), PartitionTrigger("ns", "d"),
                            generation=generation)
        event = ScheduleObserved(schedule, T0)
        (version,) = log.append_batch([store.prepare(stream, [event])])
        store.put(stream, matching.evolve(store.load(stream).state, event), version)

    store.snapshot()
    for index in range(3):  # after the snapshot was taken, before it caught up
        observe(index, 2)
    assert store._unsnapshotted == 3
    writer_busy.set()
    await store._saving
    position, entries = MapSnapshots(log, "test", store._snapshots.schema).load()
    assert position == log.head_position() and entries["matcher-s0"].state.schedule.generation == 2
    assert store._unsnapshotted == 0
    observe(3, 2)
    assert store._unsnapshotted == 1
    log.close()
