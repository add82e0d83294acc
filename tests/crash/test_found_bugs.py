"""Bugs the crash sweep found, pinned down at the level where they were fixed."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from sluice.bus.port import Record
from sluice.bus.topics import JOBS
from sluice.clock import SimulatedClock
from sluice.domain.checking import EnqueueJob
from sluice.domain.common import ProgramRef
from sluice.domain.constraints import DelayConstraint
from sluice.domain.jobs import Job, TriggerContext
from sluice.eventlog.sqlite import SqliteEventLog
from sluice_services.checker.service import CheckerService

T0 = datetime(2026, 3, 28, 21, 16, 55, tzinfo=timezone.utc)


async def test_a_checker_restarted_after_a_check_fell_due_admits_at_once(tmp_path):
    """Sweep seed 1, run seed 2029953362 on SQLite: the checker died between its delayed job falling
    due and appending the admission; restarted, it set no timer (the pass was due now, not later),
    so the job waited for an unrelated event three minutes on."""
    clock = SimulatedClock(T0)
    log = SqliteEventLog(tmp_path / "events.db", clock=clock)
    job = Job("job-1", "s1", 1, ProgramRef("ns", "app", "p"), TriggerContext("s1", "s1"), T0,
              constraints=(DelayConstraint(120),), sequence=1, triggered_at=T0)
    checker = CheckerService(log, clock)
    checker.recover()
    await checker.apply([(Record(JOBS, 0, 0, b"s1", b"", (), 0), EnqueueJob(job))])
    assert checker.next_wake_at() == T0 + timedelta(seconds=120)

    clock.advance(timedelta(seconds=120))  # due; the checker crashes before its pass is appended
    restarted = CheckerService(log, clock)
    restarted.recover()
    assert restarted.next_wake_at() == clock.now()
    assert restarted.fire_due() and not restarted.state.queue
    log.close()
