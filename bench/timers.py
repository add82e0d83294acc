"""timers: time-triggered schedules through the matcher and the checker on a durable SQLite log.

Figures, on a simulated clock (schedule time) measured in wall time (processing):

- spread_at_the_minute: S schedules (default 10,000) whose cron fires at the same minute. The
  clock is set to that minute; then the matcher fires every due timer, its JobTriggered events
  are handed to the checker as the bus would carry them (protobuf bytes, a poll of 500 at a
  time), and the checker admits each poll's jobs in one decision. Each service's outbox route
  reads its own streams, as its relay does: the checker's launch requests go out as it admits
  them. The figure is the wall time
  from the minute to the last LaunchRequested produced by the checker's outbox route (target
  1.0 s). Durable: each launch request is checked to come from the log after its job's
  JobTriggered (`_check_durable`, after the clock stops). Creating the schedules is not timed.
- spread_cpu_at_the_minute: the CPU seconds of this process over that spread: on a loaded machine
  the wall time counts waits for a core, this does not.
- ratio_to_apscheduler: that spread over APScheduler 3's (BackgroundScheduler, memory job store,
  thread pool, no durability) on the same S crons at the same minute, in the same run (target 1.0).
- spread_at_the_minute_100k (--full only): the spread of 100,000 schedules (target 5 s).
- cost_per_fire: D schedules (default 100,000) with daily crons spread over the day's minutes;
  the clock steps through one simulated day minute by minute and the matcher fires what is due.
  Wall time of the day divided by the fires (each one a JobTriggered naming the schedule's next
  job, appended durably).

The matcher, the relays and the checker take turns on one thread, as in embedded mode: the spread
is the sum of their work, and the checker takes the jobs the matcher's route sent instead of parsing
them (sluice.wire.sent_jobs; 2026-11-28, alternating with the code before: 10,000 0.99 -> 0.71 s, 100,000
12.2 -> 7.6 s, medians). Where it goes (10,000 schedules, 2026-11-25, 3.3 s in all): the matcher's
fires 1.1 s (~110 us each: the cron evaluation, the fired job and the next one, their encoding and
append), the checker's decisions 1.0 s, the two outbox routes 0.7 s (each event decoded from its
JSON, then encoded as protobuf), reading the log and parsing the jobs 0.5 s. On 2026-11-26, CPU
seconds of each part on a machine at load 7-10 (4.1-4.2 s in all): the matcher's fires 1.7-1.9, the
checker's decisions 0.95-1.0 (a poll's admitted jobs are no longer queued first), parsing the jobs
0.3-0.5, the two routes 0.5 (the job's message built from the event's JSON), reading the log
0.35-0.55. Over Kafka the matcher and the checker work at once, in two processes. Embedded mode does
take turns: its services share one event loop and the matcher fires a minute's due timers in one
synchronous call, so the checker starts on the first poll only after the last fire is appended
(its in-process bus also appends each message to its own file, which this bench leaves out).
On 2026-11-26 (load 12-30, CPU microseconds per job, process_time): the checker's parse of a
JobTriggered 16 -> 11 (its Job built without the frozen __init__), its route 12 -> 2 (a job admitted
as it arrived launches with the bytes it arrived in), its evolve of a JobAdmitted 10 -> 5.5, its
decision 9 -> 7 (a launch shared by the jobs alike when nothing is reserved). On 2026-11-27 (load 5-14):
the checker's route 0.22 -> 0.07 CPU s (it kept 4,096 launch requests, so 5,904 of the burst's were built
again from their events' JSON; now kept up to 16 MiB), its fold 7.5 -> 5 us per job admitted on
arrival (one edit of the schedules map per decision); the cyclic collector took 0.4-0.7 s of the
spread's CPU, spread over every part. Later that day (load 5-7, gc.callbacks process time, medians of 3):
0.80 -> 0.09 s, the matcher's burst and the checker's large polls frozen as they end (no collection
of the spread finds cyclic garbage); spread CPU 4.24 -> 2.93 s in the same runs. The heap is kept as the
service runtime keeps it (sluice.runtime.heap: young collections spaced out from the start, the registered
schedules frozen as a recovery's are): the collector's CPU in the spread 0.16-0.29 -> 0.08-0.10 s (load 2-3).
"""
from __future__ import annotations

import asyncio
import random
import tempfile
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from bench import Figure, deliver, option, progress
from sluice.bus.port import Record
from sluice.bus.topics import JOBS, SCHEDULES
from sluice.clock import SimulatedClock
from sluice.domain.common import ProgramRef
from sluice.domain.schedules import Schedule, schedule_id_for
from sluice.domain.triggers import TimeTrigger
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.runtime.heap import freeze_long_lived, space_young_collections
from sluice.runtime.map_snapshots import snapshots_written
from sluice.v1 import jobs_pb2, schedules_pb2
from sluice.wire.sent_jobs import SentJobs
from sluice.wire.schedules import schedule_to_proto
from sluice_services.checker.service import CheckerService
from sluice_services.catalogue import CHECKER, MATCHER
from sluice_services.matcher.service import MatcherService

DESCRIPTION = "cron fires through matcher and checker: spread of 10,000 fires at one minute, cost per fire over a day"
DEFAULT_SCHEDULES = 10_000
DEFAULT_DAY_SCHEDULES = 100_000
TARGET_SPREAD_S = 1.0
FULL_SCHEDULES = 100_000
"""--full also measures the spread of this many schedules at one minute."""
TARGET_SPREAD_100K_S = 5.0
TARGET_RATIO_TO_APSCHEDULER = 1.0
"""Durable Sluice no slower than APScheduler's in-memory scheduler on the same crons (issue 27)."""
POLL = 500
"""Records per consumer poll (aiokafka's default max_records)."""
MINUTE = datetime(2026, 11, 23, 12, 30, tzinfo=timezone.utc)
PROGRAM = ProgramRef("bench", "timers", "noop")


def run(options: object) -> list[Figure]:
    schedules = option(options, "schedules", DEFAULT_SCHEDULES)
    day_schedules = option(options, "day_schedules", DEFAULT_DAY_SCHEDULES)
    full = bool(getattr(options, "full", False))
    figures = []
    with tempfile.TemporaryDirectory(prefix="sluice-bench-timers-") as tmp:
        spread, launched, cpu = asyncio.run(_spread(Path(tmp) / "minute.db", schedules))
        progress(f"[timers] {launched} launch requests {spread:.3f} s after the minute ({schedules} schedules), "
                 f"{cpu:.3f} CPU s")
        peer = apscheduler_spread(schedules)
        progress(f"[timers] APScheduler (in memory, no durability): {schedules} jobs ran {peer:.3f} s after the minute")
        figures += [Figure("spread_at_the_minute", spread, "s", TARGET_SPREAD_S),
                    Figure("spread_cpu_at_the_minute", cpu, "s", None),
                    Figure("ratio_to_apscheduler", spread / peer, "ratio", TARGET_RATIO_TO_APSCHEDULER)]
        if full:
            spread_100k, _, cpu_100k = asyncio.run(_spread(Path(tmp) / "minute-100k.db", FULL_SCHEDULES))
            progress(f"[timers] {FULL_SCHEDULES} launch requests {spread_100k:.3f} s after the minute, {cpu_100k:.3f} CPU s")
            figures.append(Figure("spread_at_the_minute_100k", spread_100k, "s", TARGET_SPREAD_100K_S))
        per_fire, fires = _day(Path(tmp) / "day.db", day_schedules, random.Random(getattr(options, "seed", 42)))
        progress(f"[timers] {fires} fires over a simulated day of {day_schedules} schedules: {per_fire:.1f} µs/fire")
    return [*figures, Figure("cost_per_fire", per_fire, "us", None)]


def _schedule(index: int, cron: str) -> Schedule:
    name = f"timer-{index:06d}"
    return Schedule(schedule_id_for(PROGRAM, name), name, PROGRAM, TimeTrigger(cron), enabled=True)


async def _register(matcher: MatcherService, schedules: list[Schedule]) -> None:
    """The schedules as the registry's changes reach the matcher: ScheduleChanged records handed to
    its bus handler a poll at a time, as the consumer loop does (not timed). The snapshot they lead to
    is written before the clock starts, as it is long before the minute in a service."""
    handler = matcher.handlers()[SCHEDULES]
    records = [Record(SCHEDULES, 0, offset, s.id.encode(), schedules_pb2.ScheduleChanged(
        schedule_id=s.id, schedule=schedule_to_proto(s)).SerializeToString(), (), 0) for offset, s in enumerate(schedules)]
    for start in range(0, len(records), POLL):
        await deliver(handler, records[start:start + POLL])
    await snapshots_written()


async def _spread(path: Path, count: int) -> tuple[float, int, float]:
    """(wall seconds, launch requests, CPU seconds) from the minute to the last launch request."""
    clock = SimulatedClock(MINUTE - timedelta(minutes=1))
    log = SqliteEventLog(path, clock=clock)
    sent_jobs = SentJobs(readers=1)  # as embedded mode shares one between the matcher and the jobs' consumers
    matcher, checker = MatcherService(log, clock, sent_jobs), CheckerService(log, clock, sent_jobs=sent_jobs)
    space_young_collections()  # the heap as the service runtime keeps it: from its start,
    await _register(matcher, [_schedule(i, f"{MINUTE.minute} {MINUTE.hour} * * *") for i in range(count)])
    freeze_long_lived()  # and after its recovery
    after = log.head_position()
    clock.set(MINUTE)
    started, cpu_started = time.perf_counter(), time.process_time()
    matcher.fire_due()
    offset = 0
    launches: list[tuple[int, bytes]] = []
    """(log position of the event routed, LaunchRequested bytes) of each launch request."""
    triggered_at: dict[str, int] = {}
    """job id -> log position of its JobTriggered, for the durability check after the clock stops."""
    checker_after = after
    while events := log.read_all(after, POLL, MATCHER.stream_prefixes):
        after = events[-1].position
        records = []
        for recorded in events:
            for message in matcher.route(recorded):
                records.append(Record(JOBS, 0, offset, message.key.encode(), message.value, (), 0))
                triggered_at[message.key] = recorded.position
                offset += 1
        for start in range(0, len(records), POLL):  # the checker's consumer takes a poll's worth of jobs at once
            await checker.apply([(record, checker.parse_job_triggered(record)) for record in records[start:start + POLL]])
            await asyncio.sleep(0)  # the loop turns between the consumer's polls
            while admitted := log.read_all(checker_after, POLL, CHECKER.stream_prefixes):  # its relay follows it
                checker_after = admitted[-1].position
                launches += [(recorded.position, message.value) for recorded in admitted
                             for message in checker.route(recorded)]
    spread, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    await snapshots_written()  # as the service runtime does before it closes the log
    log.close()
    if len(launches) != count:
        raise RuntimeError(f"{len(launches)} launch requests for {count} schedules due at the minute")
    _check_durable(launches, triggered_at)
    return spread, len(launches), cpu


def _check_durable(launches: list[tuple[int, bytes]], triggered_at: dict[str, int]) -> None:
    """Each launch request went out from the log, after its job's fire was in the log."""
    for position, value in launches:
        job = jobs_pb2.LaunchRequested.FromString(value).job
        fired = triggered_at.get(job.schedule_id)
        if fired is None or fired >= position:
            raise RuntimeError(f"the launch request of job {job.id} left before its JobTriggered was in the log")


def apscheduler_spread(count: int) -> float:
    """APScheduler's BackgroundScheduler (memory job store, thread pool) with the same `count` crons
    due at MINUTE: wall time from the minute to the last job's run. Its clock is the simulated one
    (APScheduler reads datetime.now in its scheduler and executor modules), so no real minute is waited for."""
    from apscheduler.executors import base as executors_base
    from apscheduler.schedulers import base as schedulers_base
    from apscheduler.schedulers.background import BackgroundScheduler
    from apscheduler.triggers.cron import CronTrigger

    simulated = [MINUTE - timedelta(minutes=1)]

    class SimulatedDatetime(datetime):
        @classmethod
        def now(cls, tz=None):
            return simulated[0].astimezone(tz)

    ran: list[float] = []
    done = threading.Event()

    def launch() -> None:
        ran.append(time.perf_counter())
        if len(ran) == count:
            done.set()

    modules = (schedulers_base, executors_base)
    originals = [module.datetime for module in modules]
    for module in modules:
        module.datetime = SimulatedDatetime
    scheduler = BackgroundScheduler(timezone=timezone.utc)
    try:
        scheduler.start(paused=True)
        for index in range(count):
            scheduler.add_job(launch, CronTrigger(minute=MINUTE.minute, hour=MINUTE.hour, timezone=timezone.utc),
                              id=f"timer-{index:06d}", misfire_grace_time=None)
        simulated[0] = MINUTE
        started = time.perf_counter()
        scheduler.resume()
        if not done.wait(300):
            raise RuntimeError(f"APScheduler ran {len(ran)} of {count} jobs")
        return max(ran) - started
    finally:
        scheduler.shutdown(wait=False)
        for module, original in zip(modules, originals):
            module.datetime = original


def _day(path: Path, count: int, rng: random.Random) -> tuple[float, int]:
    start = MINUTE.replace(hour=0, minute=0)
    clock = SimulatedClock(start)
    log = SqliteEventLog(path, clock=clock)
    matcher = MatcherService(log, clock)
    asyncio.run(_register(matcher, [_schedule(i, f"{rng.randrange(60)} {rng.randrange(24)} * * *") for i in range(count)]))
    fires = 0
    started = time.perf_counter()
    for minute in range(1, 24 * 60 + 1):
        clock.set(start + timedelta(minutes=minute))
        fires += matcher.fire_due()
    elapsed = time.perf_counter() - started
    log.close()
    if fires != count:
        raise RuntimeError(f"{fires} fires over the day for {count} daily schedules")
    return elapsed / fires * 1e6, fires
