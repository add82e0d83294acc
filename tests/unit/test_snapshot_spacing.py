"""A store of one big state (the checker's queue stream) spaces its snapshots by the state's size,
as a store of many streams does by their number, and packs a big one off the event loop."""
from __future__ import annotations

from datetime import datetime, timezone

from sluice.bus.port import Record
from sluice.clock import SimulatedClock
from sluice.domain.checking import ObserveSchedule
from sluice.domain.common import ProgramRef
from sluice.domain.schedules import Schedule
from sluice.domain.triggers import PartitionTrigger
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.runtime import aggregates, snapshots
from sluice_services.checker.service import CheckerService

T0 = datetime(2026, 11, 23, tzinfo=timezone.utc)
SCHEDULES = 20


def schedule(index: int, generation: int = 1) -> Schedule:
    return Schedule(f"s{index}", f"s{index}", ProgramRef("ns", "app", "p"), PartitionTrigger("ns", "d", 1),
                    enabled=True, generation=generation)


class Offsets:
    def __init__(self) -> None:
        self.next = 0

    def record(self) -> Record:
        self.next += 1
        return Record("sluice.schedules", 0, self.next, b"k", b"", (), 0)


def counting_snapshots(log: SqliteEventLog, monkeypatch) -> list[int]:
    """The head position at each snapshot the checker saves."""
    saved, save = [], log.save_snapshot

    def spy(snapshot):
        if snapshot.name == "checker":
            saved.append(log.head_position())
        save(snapshot)

    monkeypatch.setattr(log, "save_snapshot", spy)
    return saved


async def test_the_checker_snapshots_after_as_many_events_as_its_state_holds_entries(tmp_path, monkeypatch):
    monkeypatch.setattr(snapshots, "SNAPSHOT_EVERY", 3)
    log = SqliteEventLog(tmp_path / "events.db")
    saved = counting_snapshots(log, monkeypatch)
    checker, offsets = CheckerService(log, SimulatedClock(T0)), Offsets()
    checker.recover()
    await checker.apply([(offsets.record(), ObserveSchedule(f"s{i}", schedule(i))) for i in range(SCHEDULES)])
    assert saved == [SCHEDULES]  # one append of 20 events: 20 >= max(3, 20 entries)
    for generation in range(2, 2 * SCHEDULES + 3):  # each update: one event, the size stays 20
        await checker.apply([(offsets.record(), ObserveSchedule("s0", schedule(0, generation)))])
    assert saved == [SCHEDULES, 2 * SCHEDULES, 3 * SCHEDULES]  # every 20 events, not every 3
    restarted = CheckerService(log, SimulatedClock(T0))
    restarted.recover()
    assert restarted.state == checker.state
    log.close()


async def test_a_big_single_state_is_packed_off_the_event_loop(tmp_path, monkeypatch):
    monkeypatch.setattr(snapshots, "SNAPSHOT_EVERY", 3)
    monkeypatch.setattr(aggregates, "BACKGROUND_SNAPSHOT_STREAMS", 10)
    log = SqliteEventLog(tmp_path / "events.db")
    checker, offsets = CheckerService(log, SimulatedClock(T0)), Offsets()
    checker.recover()
    await checker.apply([(offsets.record(), ObserveSchedule(f"s{i}", schedule(i))) for i in range(SCHEDULES)])
    store = checker._store
    assert store._saving is not None  # one stream, but 20 entries in it
    await store._saving
    assert store._saving is None and log.read_snapshot("checker") is not None
    again = CheckerService(log, SimulatedClock(T0))
    again.recover()
    assert again.state == checker.state
    log.close()
