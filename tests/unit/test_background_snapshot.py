"""A snapshot of many streams is packed and written off the event loop, and holds the states of
the moment it was taken; a small one is written at once."""
from __future__ import annotations

import asyncio
import threading
from datetime import datetime, timezone

from sluice.domain import matching
from sluice.domain.codec import EventTypes
from sluice.domain.common import ProgramRef
from sluice.domain.matching import MatcherState, ScheduleObserved
from sluice.domain.schedules import Schedule
from sluice.domain.triggers import PartitionTrigger
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.runtime import aggregates
from sluice.runtime.aggregates import AggregateStore
from sluice.runtime.snapshots import Snapshots

T0 = datetime(2026, 11, 23, tzinfo=timezone.utc)
TYPES = EventTypes(matching.EVENTS)


def store_with_streams(log: SqliteEventLog, count: int) -> AggregateStore[MatcherState]:
    store = AggregateStore(log, TYPES, matching.evolve, MatcherState(), snapshot="test", snapshot_every=10**9)
    for index in range(count):
        stream = f"matcher-s{index}"
        schedule = Schedule(f"s{index}", f"s{index}", ProgramRef("ns", "app", "p"), PartitionTrigger("ns", "d"))
        event = ScheduleObserved(schedule, T0)
        (version,) = log.append_batch([store.prepare(stream, [event])])
        store.put(stream, matching.evolve(MatcherState(), event), version)
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
