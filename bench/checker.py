"""checker: the constraint-checker's decisions while thousands of jobs wait.

The shape: W jobs (each of its own schedule) wait on a time window that is closed (user story 6's
catch-up, a nightly window), queued through the jobs topic's BatchHandler (parse every record,
apply them together, as the consumer loop calls it) in polls of FILL_POLL on a WAL-mode SQLite
file log. Then A jobs without constraints arrive in polls of ARRIVAL_POLL: each poll is one
decision and one append, and every job is admitted at once.

Figures:
- decision_ms_p50 / decision_ms_p99: time in the handler per arriving poll, W jobs waiting.
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
from sluice.bus.topics import JOBS
from sluice.clock import SimulatedClock
from sluice.domain.common import ProgramRef
from sluice.domain.constraints import TimeWindowConstraint
from sluice.domain.jobs import Job, TriggerContext
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.v1 import jobs_pb2
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

            records = [_record(waiting + offset, f"arriving-{offset:06d}", ()) for offset in range(arrivals)]
            decisions = []
            for start in range(0, arrivals, ARRIVAL_POLL):
                poll = records[start:start + ARRIVAL_POLL]
                started = time.perf_counter()
                await deliver(handler, poll)
                decisions.append((time.perf_counter() - started) * 1000)
            if len(checker.state.queue) != waiting:
                raise RuntimeError(f"{len(checker.state.queue)} jobs queued, {waiting} expected: arrivals were not admitted")
        finally:
            log.close()
    p50, p99 = percentile(decisions, 50), percentile(decisions, 99)
    progress(f"[checker] {arrivals} arriving jobs in polls of {ARRIVAL_POLL} with {waiting} waiting: "
             f"p50 {p50:.2f} ms, p99 {p99:.2f} ms per poll")
    return [
        Figure("decision_ms_p50", p50, "ms", None),
        Figure("decision_ms_p99", p99, "ms", None),
        Figure("queued_per_s", waiting / queuing, "jobs/s", None),
    ]



def _record(offset: int, schedule: str, constraints: tuple) -> Record:
    job = Job(f"{schedule}-j1", schedule, 1, ProgramRef("bench", "app", "p"), TriggerContext(schedule, schedule),
              T0, 0, constraints, sequence=1, triggered_at=T0)
    value = jobs_pb2.JobTriggered(job=job_to_proto(job)).SerializeToString()
    return Record(JOBS, 0, offset, schedule.encode(), value, (), 0)
