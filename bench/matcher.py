"""matcher: MatcherService on a durable SqliteEventLog file, driven directly (no bus).

Registers S partition-trigger schedules (count 1..3) spread round-robin over D datasets through
observe(), then pushes M PartitionCommitted notifications, each on a random dataset, through
match(). Each notification therefore reaches S/D schedules, and each of those is one decision
and one append (one SQLite transaction) on that schedule's stream.

Figures:
- notifications_per_s: M / time spent in match() (target 20000).
- memory_per_schedule: Python heap (tracemalloc) retained per registered schedule: the
  matcher's cached aggregate state, its copy of the schedule and the reverse index (target 2048).
  Measured on a separate matcher, since tracemalloc slows allocation down; SQLite's own page
  cache is allocated outside Python and not counted. This is the footprint right after
  registration: a schedule that has matched notifications also keeps the ids of its last 1024
  (matching.RECENT_NOTIFICATIONS), tens of kB more.
- schedules_registered_per_s: S / time spent in observe(), without tracemalloc.

Default sizes: S=10,000 over D=1,000 datasets (fan-out 10), but M=1,000 rather than 50,000:
at the ~200 notifications/s measured here 50,000 would take over four minutes; a run with the
defaults takes ~15 s, most of it the tracemalloc pass. BENCH_NOTIFICATIONS=50000 or
--notifications 50000 restores the full size.
"""
from __future__ import annotations

import gc
import random
import tempfile
import time
import tracemalloc
from datetime import datetime, timedelta, timezone
from pathlib import Path

from bench import Figure, option, progress
from sluice.clock import SystemClock
from sluice.domain.common import Notification, PartitionCommitted, PartitionRef, ProgramRef
from sluice.domain.schedules import Schedule, schedule_id_for
from sluice.domain.triggers import PartitionTrigger
from sluice.eventlog.sqlite import SqliteEventLog
from sluice_services.matcher.service import MatcherService

DESCRIPTION = "MatcherService.observe()/match() on a SQLite file log: notifications/s, bytes/schedule, schedules/s"
DEFAULT_SCHEDULES = 10_000
DEFAULT_DATASETS = 1_000
DEFAULT_NOTIFICATIONS = 1_000  # see the module docstring
NAMESPACE = "bench"
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def run(options: object) -> list[Figure]:
    schedules = option(options, "schedules", DEFAULT_SCHEDULES)
    datasets = min(option(options, "datasets", DEFAULT_DATASETS), schedules)
    notifications = option(options, "notifications", DEFAULT_NOTIFICATIONS)
    seed = getattr(options, "seed", 42)
    rng = random.Random(seed)
    counts = [rng.randint(1, 3) for _ in range(schedules)]
    with tempfile.TemporaryDirectory(prefix="sluice-bench-matcher-") as tmp:
        per_schedule = _memory_per_schedule(Path(tmp) / "memory.db", counts, datasets)
        progress(f"[matcher] memory: {per_schedule:.0f} B/schedule (tracemalloc, {schedules} schedules)")

        log = SqliteEventLog(Path(tmp) / "events.db")
        try:
            matcher = MatcherService(log, SystemClock())
            started = time.perf_counter()
            for index, count in enumerate(counts):
                schedule = _schedule(index, count, datasets)
                matcher.observe(schedule.id, schedule)
            registration = time.perf_counter() - started
            progress(f"[matcher] registered {schedules} schedules over {datasets} datasets in {registration:.2f} s")

            batch = [_notification(i, rng.randrange(datasets)) for i in range(notifications)]
            head = log.head_position()
            started = time.perf_counter()
            for notification in batch:
                matcher.match(notification)
            matching = time.perf_counter() - started
            appended = log.head_position() - head
            progress(f"[matcher] matched {notifications} notifications in {matching:.2f} s"
                     f" ({appended} events appended, {appended / matching:.0f} events/s)")
        finally:
            log.close()
    return [
        Figure("notifications_per_s", notifications / matching, "notifications/s", 20000),
        Figure("memory_per_schedule", per_schedule, "bytes", 2048),
        Figure("schedules_registered_per_s", schedules / registration, "schedules/s", None),
    ]


def _memory_per_schedule(path: Path, counts: list[int], datasets: int) -> float:
    """Python memory still allocated after registering every schedule, per schedule. The schedules
    are built inside the traced window: the matcher keeps them, as it keeps the decoded ones."""
    log = SqliteEventLog(path)
    try:
        matcher = MatcherService(log, SystemClock())
        gc.collect()
        tracemalloc.start()
        try:
            before, _ = tracemalloc.get_traced_memory()
            for index, count in enumerate(counts):
                schedule = _schedule(index, count, datasets)
                matcher.observe(schedule.id, schedule)
            del schedule
            gc.collect()
            after, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        return (after - before) / len(counts)
    finally:
        log.close()


def _schedule(index: int, count: int, datasets: int) -> Schedule:
    program = ProgramRef(NAMESPACE, "app", f"program_{index % 100}")
    name = f"on-ds-{index:08d}"
    return Schedule(
        id=schedule_id_for(program, name),  # a uuid, as the registry assigns
        name=name,
        program=program,
        trigger=PartitionTrigger(NAMESPACE, f"ds-{index % datasets:05d}", count),
        properties={"experiment": f"exp-{index % 100}"},
        enabled=True,
    )


def _notification(index: int, dataset: int) -> Notification:
    partition = PartitionRef({"hour": f"{index % 24:02d}"}, f"/data/ds-{dataset:05d}/{index}", 1024, 10)
    return Notification(f"n-{index:08d}", T0 + timedelta(seconds=index),
                        PartitionCommitted(NAMESPACE, f"ds-{dataset:05d}", (partition,)))
