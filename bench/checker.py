"""checker: the constraint-checker's decisions while thousands of jobs wait.

The shape: W jobs (each of its own schedule) wait on a time window that is closed (user story 6's
catch-up, a nightly window), queued through the jobs topic's BatchHandler (parse every record,
apply them together, as the consumer loop calls it) in polls of FILL_POLL on a WAL-mode SQLite
file log. Then A jobs arrive in polls of ARRIVAL_POLL, each of its own program with at most one
run at a time: each poll is one decision and one append, and every job is admitted at once. Then
their runs end, reported on the program-status topic in polls of ARRIVAL_POLL.

Figures:
- decision_ms_p50 / decision_ms_p99: time in the handler per arriving poll, W jobs waiting.
- run_end_ms_p50 / run_end_ms_p99: time in the handler per poll of run ends, W jobs waiting.
- queued_per_s: W / time to queue the waiting jobs (each poll's decision with all before waiting).

Sizes: BENCH_WAITING (default 10,000), BENCH_ARRIVALS (default 2,000).
"""
from __future__ import annotations

import asyncio
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from bench import Figure, deliver, option, percentile, progress
from sluice.bus.port import Record
from sluice.bus.topics import JOBS, PROGRAM_NOTIFICATIONS
from sluice.clock import SimulatedClock
from sluice.domain.common import Notification, ProgramRef, ProgramStatusChanged, RunStatus
from sluice.domain.constraints import ConcurrencyConstraint, TimeWindowConstraint
from sluice.domain.jobs import Job, TriggerContext
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.ids import run_id_for
from sluice.v1 import jobs_pb2
from sluice.wire.common import notification_to_proto
from sluice.wire.jobs import job_to_proto
from sluice_services.checker.service import CheckerService

DESCRIPTION = "constraint-checker with W jobs waiting on a closed window: ms per poll of arriving jobs, jobs queued/s"
DEFAULT_WAITING, DEFAULT_ARRIVALS = 10_000, 2_000
FILL_POLL, ARRIVAL_POLL = 500, 10
T0 = datetime(2026, 1, 1, 12, tzinfo=timezone.utc)
CLOSED = TimeWindowConstraint("22:00", "06:00", "UTC")
"""Closed at T0 (noon): every job with it waits for 22:00."""


def run(options: object) -> list[Figure]:
    return asyncio.run(_run(option(options, "waiting", DEFAULT_WAITING), option(options, "arrivals", DEFAULT_ARRIVALS)))


async def _run(waiting: int, arrivals: int) -> list[Figure]:
    with tempfile.TemporaryDirectory(prefix="sluice-bench-checker-") as tmp:
        log = SqliteEventLog(Path(tmp) / "events.db")
        try:
            checker = CheckerService(log, SimulatedClock(T0))
            checker.recover()
            handler = checker.handlers()[JOBS]
            records = [_record(offset, f"waiting-{offset:06d}", (CLOSED,)) for offset in range(waiting)]
            started = time.perf_counter()
            for start in range(0, waiting, FILL_POLL):
                await deliver(handler, records[start:start + FILL_POLL])
            queuing = time.perf_counter() - started
            progress(f"[checker] {waiting} jobs queued waiting in {queuing:.2f} s ({waiting / queuing:.0f} jobs/s)")

            records = [_record(waiting + offset, f"arriving-{offset:06d}", (ConcurrencyConstraint(1),),
                               f"runner-{offset:06d}") for offset in range(arrivals)]
            decisions = await _timed_polls(handler, records)
            if len(checker.state.queue) != waiting:
                raise RuntimeError(f"{len(checker.state.queue)} jobs queued, {waiting} expected: arrivals were not admitted")
            ends = [_run_ended(offset, f"arriving-{offset:06d}", f"runner-{offset:06d}") for offset in range(arrivals)]
            run_ends = await _timed_polls(checker.handlers()[PROGRAM_NOTIFICATIONS], ends)
            if checker.state.world.running_total() or len(checker.state.queue) != waiting:
                raise RuntimeError("the run ends were not all recorded, or a waiting job was admitted")
        finally:
            log.close()
    p50, p99 = percentile(decisions, 50), percentile(decisions, 99)
    ends50, ends99 = percentile(run_ends, 50), percentile(run_ends, 99)
    progress(f"[checker] with {waiting} waiting, per poll of {ARRIVAL_POLL}: {arrivals} arriving jobs "
             f"p50 {p50:.2f} ms, p99 {p99:.2f} ms; their run ends p50 {ends50:.2f} ms, p99 {ends99:.2f} ms")
    return [
        Figure("decision_ms_p50", p50, "ms", None),
        Figure("decision_ms_p99", p99, "ms", None),
        Figure("run_end_ms_p50", ends50, "ms", None),
        Figure("run_end_ms_p99", ends99, "ms", None),
        Figure("queued_per_s", waiting / queuing, "jobs/s", None),
    ]


async def _timed_polls(handler, records: list[Record]) -> list[float]:
    """ms in the handler per poll of ARRIVAL_POLL records."""
    times = []
    for start in range(0, len(records), ARRIVAL_POLL):
        poll = records[start:start + ARRIVAL_POLL]
        started = time.perf_counter()
        await deliver(handler, poll)
        times.append((time.perf_counter() - started) * 1000)
    return times


def _record(offset: int, schedule: str, constraints: tuple, program: str = "p") -> Record:
    job = Job(f"{schedule}-j1", schedule, 1, ProgramRef("bench", "app", program), TriggerContext(schedule, schedule),
              T0, 0, constraints, sequence=1, triggered_at=T0)
    value = jobs_pb2.JobTriggered(job=job_to_proto(job)).SerializeToString()
    return Record(JOBS, 0, offset, schedule.encode(), value, (), 0)


def _run_ended(offset: int, schedule: str, program: str) -> Record:
    status = ProgramStatusChanged(ProgramRef("bench", "app", program), run_id_for(f"{schedule}-j1"),
                                  RunStatus.COMPLETED, schedule, f"{schedule}-j1")
    value = notification_to_proto(Notification(f"ended-{offset:06d}", T0, status)).SerializeToString()
    return Record(PROGRAM_NOTIFICATIONS, 0, offset, program.encode(), value, (), 0)
