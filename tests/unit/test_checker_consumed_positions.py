"""The checker records consumed positions expecting the values it knows: records another checker
recorded meanwhile (a rebalance) are skipped after reading the positions again, the rest recorded."""
from __future__ import annotations

from datetime import datetime, timezone

from sluice.bus.port import Record
from sluice.clock import SimulatedClock
from sluice.domain.checking import ObserveSchedule
from sluice.domain.common import ProgramRef
from sluice.domain.schedules import Schedule
from sluice.domain.triggers import PartitionTrigger
from sluice.eventlog.sqlite import SqliteEventLog
from sluice_services.checker.service import CheckerService

T0 = datetime(2026, 11, 24, tzinfo=timezone.utc)


def observed(offset: int) -> tuple[Record, ObserveSchedule]:
    schedule = Schedule(f"s{offset}", f"s{offset}", ProgramRef("ns", "app", "p"), PartitionTrigger("ns", "d", 1),
                        enabled=True)
    return Record("sluice.schedules", 0, offset, b"k", b"", (), 0), ObserveSchedule(schedule.id, schedule)


async def test_records_another_checker_recorded_meanwhile_are_skipped_and_the_rest_recorded(tmp_path):
    log = SqliteEventLog(tmp_path / "events.db")
    first = CheckerService(log, SimulatedClock(T0))
    first.recover()
    await first.apply([observed(offset) for offset in range(5)])
    second = CheckerService(log, SimulatedClock(T0))
    second.recover()
    await second.apply([observed(5)])

    await first.apply([observed(5), observed(6)])  # it still knows position 5 as the next to record
    assert log.read_checkpoint("checker:sluice.schedules:0") == 7
    restarted = CheckerService(log, SimulatedClock(T0))
    restarted.recover()
    assert restarted.state == first.state
    assert {f"s{offset}" for offset in range(7)} <= set(restarted.state.schedules)
    log.close()
