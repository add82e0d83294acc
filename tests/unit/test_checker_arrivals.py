"""The checker service checks arriving jobs alone while what its last passes settled holds, and
over the whole queue when a waiting job may have fallen due (`checking.Settled`)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from sluice.bus.port import Record
from sluice.clock import SimulatedClock
from sluice.domain.checking import QUEUE_STREAM, EnqueueJob, admitted_jobs
from sluice.domain.common import ProgramRef
from sluice.domain.constraints import DelayConstraint
from sluice.domain.jobs import Job, TriggerContext
from sluice.eventlog.sqlite import SqliteEventLog
from sluice_services.checker.service import TYPES, CheckerService

T0 = datetime(2026, 11, 24, tzinfo=timezone.utc)
P = ProgramRef("ns", "app", "p")


def arriving(offset: int, *constraints) -> tuple[Record, EnqueueJob]:
    schedule = f"s{offset}"
    job = Job(f"{schedule}-j1", schedule, 1, P, TriggerContext(schedule, schedule), T0, 0, constraints,
              sequence=1, triggered_at=T0)
    return Record("sluice.jobs", 0, offset, schedule.encode(), b"", (), 0), EnqueueJob(job)


def admitted(log: SqliteEventLog) -> list[str]:
    return [job.id for job in admitted_jobs(TYPES.decode(event) for event in log.read_stream(QUEUE_STREAM))]


async def test_a_job_arriving_after_a_waiting_one_fell_due_admits_both_before_the_timer_fires():
    log, clock = SqliteEventLog(), SimulatedClock(T0)
    checker = CheckerService(log, clock)
    checker.recover()
    await checker.apply([arriving(0, DelayConstraint(30)), arriving(1, DelayConstraint(600))])
    assert checker.next_wake_at() == T0 + timedelta(seconds=30) and admitted(log) == []

    await checker.apply([arriving(2, DelayConstraint(60))])  # before the first falls due: checked alone
    assert checker.next_wake_at() == T0 + timedelta(seconds=30) and admitted(log) == []

    clock.advance(timedelta(seconds=45))  # the timer has not fired yet when the next job arrives
    await checker.apply([arriving(3)])
    assert admitted(log) == ["s0-j1", "s3-j1"]
    assert checker.next_wake_at() == T0 + timedelta(seconds=60)
    clock.advance(timedelta(seconds=15))
    assert checker.fire_due() and admitted(log) == ["s0-j1", "s3-j1", "s2-j1"]
    assert checker.next_wake_at() == T0 + timedelta(seconds=600)
    log.close()


async def test_a_large_poll_is_decided_with_the_collector_paused_and_its_survivors_frozen(monkeypatch):
    import gc
    from sluice.runtime import heap
    from sluice_services.checker import service
    frozen: list[bool] = []
    monkeypatch.setattr(heap.gc, "freeze", lambda: frozen.append(gc.isenabled()))
    monkeypatch.setattr(service, "FROZEN_AFTER_COMMANDS", 3)
    log, clock = SqliteEventLog(), SimulatedClock(T0)
    checker = CheckerService(log, clock)
    checker.recover()
    await checker.apply([arriving(0), arriving(1)])
    assert frozen == [] and admitted(log) == ["s0-j1", "s1-j1"]
    await checker.apply([arriving(2), arriving(3), arriving(4)])
    assert frozen == [False] and gc.isenabled() and admitted(log) == [f"s{n}-j1" for n in range(5)]
    log.close()
