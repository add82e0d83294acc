"""matcher: the matcher stage's bus handlers (MatcherService.handlers()) on a durable SQLite file log.

The issue's shape: S schedules with partition triggers (count 1..3) over D datasets, a fifth of
them AND composites over two datasets; M PartitionCommitted notifications, each on a random
dataset. What the first stage (ScheduleLookup) would publish is built beforehand and untimed: one
MatchRequested record per (notification, matches partition) with that partition's interested
schedules attached and the notification's source offset, in polls of POLL records (the bus's
max_records). Each poll goes through the
matches topic's BatchHandler as the consumer loop calls it (parse every record, apply them
together): one append_batch per poll, in a WAL-mode SQLite file, with the consumed offsets.
Schedules are registered the same way, through the schedules topic's handler, and the heap is
then frozen out of garbage collection, as the service runtime does after its recovery. Then a warm-up
of WARM_UP_PER_DATASET notifications per dataset goes through untimed (in matcher-bound too): fresh
schedules fire less often (a count-3 schedule's first two matches fire nothing), and a first window
of fresh ones fired ~27% fewer jobs than a later one: it measured the workload's mix, not the log.

Figures:
- notifications_per_s: M / time in the matches handler. Every notification reaches ~1.2 S/D
  schedules (an AND listens to two datasets): match_requests_per_s is the same run counted per
  schedule decision.
- ratio_to_bound: notifications_per_s over matcher-bound's (bench/matcher_bound.py) on the same
  records, run in the same invocation right after (target 0.5, issue 27).
- append_scaling: throughput of the last SCALING_WINDOW notifications over that of the first (a
  quarter of M each when M is smaller): at --full, the last 5,000 of 200,000 against the first 5,000, after
  the warm-up's 30,000 (target 0.9: the cost of an append does not grow with the log).
- memory_per_schedule: Python heap (tracemalloc) retained per schedule once every schedule's
  window of recent notification ids is full (each matched RECENT_PER_SCHEDULE times or more): its aggregate
  state and pending job, its copy of the definition, the reverse index, the notifications shared
  by pending jobs (target 2048). Measured on a separate matcher of MEMORY_SCHEDULES schedules of
  the same shape (tracemalloc slows allocation down ~3x); SQLite's page cache is not counted. Once
  the last background snapshot is written: one in flight keeps the states it copied alive beside
  their successors, up to twice the states for its duration (stderr prints that figure too).
  memory_per_schedule_registered: the same right after registration.
- schedules_registered_per_s: S / time in the schedules handler.

Where the time goes (10,000 schedules, 2026-11-27): before the matcher's batch records, the SQLite append
took ~40% (sampled with py-spy: the insert, two indexes, the (stream, version) one on random pages; the
version probe; the commit), deciding ~22%, encoding and event ids ~11%, parsing ~9%: a row per decision.
Since a poll's decisions are one record per matches partition (sluice.eventlog.batched), per 1,250
notifications (~15,000 decisions): appending 0.04 s and flat over the run, encoding 0.12-0.15 s (each
event's JSON), deciding 0.17-0.25 s (the domain's events, trigger states and jobs; the cyclic collector's
walks grow with the heap), parsing 0.08 s, the store's commit 0.04-0.07 s. The ratio target needs the
decision itself near matcher-bound's (docs/decisions.md, issue 27).

Sizes: defaults keep `make bench BENCH=matcher` (3 runs) at a few minutes; --full is the issue's
size (100,000 schedules over 10,000 datasets, 200,000 notifications, memory on 10,000 schedules);
BENCH_MEMORY_SCHEDULES sets the memory pass's size (fixed costs, such as caches, weigh more on few).
"""
from __future__ import annotations

import asyncio
import gc
import random
import tempfile
import time
import tracemalloc
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterator

from bench import Figure, deliver, option, progress
from sluice.bus.port import Record, kafka_partition
from sluice.bus.topics import MATCHES, MATCHES_PARTITIONS, PARTITION_NOTIFICATIONS, SCHEDULES
from sluice.clock import SystemClock
from sluice.domain.common import Notification, PartitionCommitted, PartitionRef, ProgramRef
from sluice.domain.schedules import Schedule, schedule_id_for
from sluice.domain.triggers import AndTrigger, PartitionTrigger
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.runtime.heap import freeze_long_lived, space_young_collections
from sluice.runtime.map_snapshots import snapshots_written
from sluice.v1 import matching_pb2, schedules_pb2
from sluice.wire.common import notification_to_proto
from sluice.wire.schedules import schedule_to_proto
from sluice.domain.matching import RECENT_PER_SCHEDULE
from sluice_services.matcher.service import MatcherService

DESCRIPTION = ("matcher stage's batch handlers on a SQLite file log (S schedules, a fifth AND composites): "
               "notifications/s, bytes/schedule, schedules/s")
DEFAULT_SCHEDULES, DEFAULT_DATASETS, DEFAULT_NOTIFICATIONS, DEFAULT_MEMORY_SCHEDULES = 10_000, 1_000, 5_000, 1_000
FULL_SCHEDULES, FULL_DATASETS, FULL_NOTIFICATIONS, FULL_MEMORY_SCHEDULES = 100_000, 10_000, 200_000, 10_000
TARGET_RATIO_TO_BOUND = 0.5
"""The product's notifications/s at least half of matcher-bound's on the same records (issue 27)."""
TARGET_APPEND_SCALING = 0.9
"""Throughput of the last window of notifications at least 90% of the first's: append cost
independent of the log's size."""
WARM_UP_PER_DATASET = 3
"""Each dataset notified 3 times on average (the largest count) before the clock starts: every schedule
fires at its steady rate."""
SCALING_WINDOW = 5000
"""append_scaling compares the first and the last this many notifications (a quarter of them when fewer)."""
AND_EVERY = 5
"""Every fifth schedule is an AND of two datasets' partition triggers."""
POLL = 500
NAMESPACE = "bench"
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def run(options: object) -> list[Figure]:
    full = bool(getattr(options, "full", False))
    schedules = option(options, "schedules", FULL_SCHEDULES if full else DEFAULT_SCHEDULES)
    datasets = max(2, min(option(options, "datasets", FULL_DATASETS if full else DEFAULT_DATASETS), schedules))
    notifications = option(options, "notifications", FULL_NOTIFICATIONS if full else DEFAULT_NOTIFICATIONS)
    memory_schedules = min(schedules, option(options, "memory_schedules",
                                             FULL_MEMORY_SCHEDULES if full else DEFAULT_MEMORY_SCHEDULES))
    seed = getattr(options, "seed", 42)
    return asyncio.run(_run(schedules, datasets, notifications, memory_schedules, seed))


async def _run(schedules: int, datasets: int, notifications: int, memory_schedules: int, seed: int) -> list[Figure]:
    with tempfile.TemporaryDirectory(prefix="sluice-bench-matcher-") as tmp:
        memory_datasets = max(2, datasets * memory_schedules // schedules)
        registered, matched = await _memory_per_schedule(Path(tmp) / "memory.db", memory_schedules, memory_datasets, seed)
        progress(f"[matcher] memory: {registered:.0f} B/schedule registered, {matched:.0f} B/schedule with full "
                 f"windows (tracemalloc, {memory_schedules} schedules over {memory_datasets} datasets)")

        log = SqliteEventLog(Path(tmp) / "events.db")
        try:
            workload = Workload(schedules, datasets, seed)
            matcher = MatcherService(log, SystemClock())
            handlers = matcher.handlers()
            space_young_collections()  # as the service runtime does from its start
            registration = await _register(handlers[SCHEDULES], workload)
            freeze_long_lived()  # as the service runtime does after recovering these schedules
            progress(f"[matcher] registered {schedules} schedules over {datasets} datasets in {registration:.2f} s")

            workload.rewind()
            warm_up = WARM_UP_PER_DATASET * datasets
            for polls in workload.match_polls(warm_up):
                for poll in polls:
                    await deliver(handlers[MATCHES], poll)
            head = log.head_position()
            matching, requests = 0.0, workload.requests
            window = max(1, min(SCALING_WINDOW, notifications // 4))
            windows: list[float] = []  # seconds per `window` notifications, in order
            for polls, count in workload.match_polls(notifications, first_index=warm_up, chunk=window, counts=True):
                started = time.perf_counter()
                for poll in polls:
                    await deliver(handlers[MATCHES], poll)
                elapsed = time.perf_counter() - started
                matching += elapsed
                if count == window:
                    windows.append(elapsed)
            requests = workload.requests - requests
            appended = log.head_position() - head
            progress(f"[matcher] after a warm-up of {warm_up}, {notifications} notifications ({requests} match "
                     f"requests) in {matching:.2f} s: "
                     f"{notifications / matching:.0f} notifications/s, {requests / matching:.0f} requests/s, "
                     f"{appended} events appended ({appended / matching:.0f} events/s)")
        finally:
            await snapshots_written()  # the last background snapshot, before its log closes
            log.close()
        bound = _bound(Path(tmp) / "bound.db", workload, warm_up, notifications)
    product = notifications / matching
    scaling = windows[0] / windows[-1]
    progress(f"[matcher] matcher-bound on the same records: {bound:.0f} notifications/s; the product's first "
             f"{window} notifications at {window / windows[0]:.0f}/s, its last {window} (log of "
             f"{appended} events) at {window / windows[-1]:.0f}/s")
    return [
        Figure("notifications_per_s", product, "notifications/s", None),
        Figure("ratio_to_bound", product / bound, "ratio", TARGET_RATIO_TO_BOUND),
        Figure("append_scaling", scaling, "ratio", TARGET_APPEND_SCALING),
        Figure("match_requests_per_s", requests / matching, "requests/s", None),
        Figure("memory_per_schedule", matched, "bytes", 2048),
        Figure("memory_per_schedule_registered", registered, "bytes", 2048),
        Figure("schedules_registered_per_s", schedules / registration, "schedules/s", None),
    ]


def _bound(path: Path, workload: "Workload", warm_up: int, notifications: int) -> float:
    """matcher-bound's notifications/s on the very records the product just took (the workload rewound),
    after the same untimed warm-up."""
    from bench.matcher_bound import CountingMatcher  # it imports this module

    workload.rewind()
    bound_log = SqliteEventLog(path)
    try:
        counting = CountingMatcher(workload, bound_log)
        for polls in workload.match_polls(warm_up):
            for poll in polls:
                counting.apply(poll)
        counting.parsing = counting.deciding = counting.appending = 0.0
        for polls in workload.match_polls(notifications, first_index=warm_up):
            for poll in polls:
                counting.apply(poll)
    finally:
        bound_log.close()
    return notifications / (counting.parsing + counting.deciding + counting.appending)


async def _register(handler, workload: "Workload") -> float:
    started = time.perf_counter()
    for poll in workload.schedule_polls():
        await deliver(handler, poll)
    return time.perf_counter() - started


async def _memory_per_schedule(path: Path, schedules: int, datasets: int, seed: int) -> tuple[float, float]:
    """Python memory still allocated per schedule after registering them all, then after enough
    notifications that every schedule matched at least RECENT_PER_SCHEDULE of them."""
    workload = Workload(schedules, datasets, seed)
    log = SqliteEventLog(path)
    try:
        matcher = MatcherService(log, SystemClock())
        handlers = matcher.handlers()
        polls = list(workload.schedule_polls())
        gc.collect()
        tracemalloc.start()
        try:
            before, _ = tracemalloc.get_traced_memory()
            for poll in polls:
                await deliver(handlers[SCHEDULES], poll)
            del polls, poll
            gc.collect()
            registered, _ = tracemalloc.get_traced_memory()
            matches = dict.fromkeys(workload.schedule_ids, 0)
            index = 0
            while min(matches.values()) < RECENT_PER_SCHEDULE:
                for poll in next(workload.match_polls(1, first_index=index)):
                    await deliver(handlers[MATCHES], poll)
                    for record in poll:
                        for target in matching_pb2.MatchRequested.FromString(record.value).targets:
                            matches[target.schedule_id] += 1
                index += 1
            del poll, record
            gc.collect()
            in_flight, _ = tracemalloc.get_traced_memory()
            await snapshots_written()
            gc.collect()
            matched, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        progress(f"[matcher] memory pass: {index} notifications until every schedule matched {RECENT_PER_SCHEDULE}; "
                 f"before the last snapshot was written {(in_flight - before) / schedules:.0f} B/schedule")
        return (registered - before) / schedules, (matched - before) / schedules
    finally:
        await snapshots_written()
        log.close()


class Workload:
    """The schedules, and the records the first stage would publish for random notifications."""

    def __init__(self, schedules: int, datasets: int, seed: int) -> None:
        self._rng = random.Random(seed)
        self._datasets = datasets
        self.schedules = [self._schedule(index) for index in range(schedules)]
        self.schedule_ids = [schedule.id for schedule in self.schedules]
        self._listeners: dict[str, list[tuple[int, str, bytes]]] = {}
        """dataset -> (matches partition, id, its MatchRequested.targets entry) of each interested schedule, by id."""
        for schedule in sorted(self.schedules, key=lambda s: s.id):
            target = matching_pb2.MatchRequested(targets=[matching_pb2.MatchTarget(
                schedule_id=schedule.id, schedule=schedule_to_proto(schedule))]).SerializeToString()
            partition = kafka_partition(schedule.id.encode(), MATCHES_PARTITIONS)
            for leaf in leaves(schedule):
                self._listeners.setdefault(leaf.dataset, []).append((partition, schedule.id, target))
        self._offsets = [0] * MATCHES_PARTITIONS
        self.requests = 0
        """(notification, schedule) pairs published so far: the matcher's per-schedule decisions."""
        self._notifications_start = self._rng.getstate()

    def rewind(self) -> None:
        """The next match_polls publish the same notifications as the first did (matches offsets go on)."""
        self._rng.setstate(self._notifications_start)

    def schedule_polls(self) -> Iterator[list[Record]]:
        records = [Record(SCHEDULES, 0, offset, schedule.id.encode(), schedules_pb2.ScheduleChanged(
            schedule_id=schedule.id, schedule=schedule_to_proto(schedule)).SerializeToString(), (), 0)
            for offset, schedule in enumerate(self.schedules)]
        for start in range(0, len(records), POLL):
            yield records[start:start + POLL]

    def match_polls(self, notifications: int, first_index: int = 0, chunk: int = 2000,
                    counts: bool = False) -> Iterator:
        """Polls of MATCHES records, built `chunk` notifications at a time (the building is not timed):
        one record per notification and matches partition, with the partition's interested schedules.
        With `counts`, (polls, notifications in them) per chunk."""
        for start in range(first_index, first_index + notifications, chunk):
            records = []
            end = min(start + chunk, first_index + notifications)
            for index in range(start, end):
                dataset = f"ds-{self._rng.randrange(self._datasets):05d}"
                suffix = matching_pb2.MatchRequested(
                    notification=notification_to_proto(_notification(index, dataset)),
                    source=matching_pb2.NotificationSource(topic=PARTITION_NOTIFICATIONS, partition=0, offset=index),
                ).SerializeToString()
                targets: dict[int, list[tuple[str, bytes]]] = {}
                for partition, schedule_id, target in self._listeners.get(dataset, ()):
                    targets.setdefault(partition, []).append((schedule_id, target))
                    self.requests += 1
                for partition, group in targets.items():
                    # concatenated protobuf messages merge: repeated targets append, the notification comes last
                    offset = self._offsets[partition]
                    self._offsets[partition] += 1
                    value = b"".join(target for _, target in group) + suffix
                    records.append(Record(MATCHES, partition, offset, group[0][0].encode(), value, (), 0))
            polls = [records[i:i + POLL] for i in range(0, len(records), POLL)]
            yield (polls, end - start) if counts else polls

    def _schedule(self, index: int) -> Schedule:
        count = self._rng.randint(1, 3)
        first = index % self._datasets
        trigger = PartitionTrigger(NAMESPACE, f"ds-{first:05d}", count)
        if index % AND_EVERY == AND_EVERY - 1:
            second = (first + 1 + self._rng.randrange(self._datasets - 1)) % self._datasets
            trigger = AndTrigger((trigger, PartitionTrigger(NAMESPACE, f"ds-{second:05d}", count)))
        program = ProgramRef(NAMESPACE, "app", f"program_{index % 100}")
        name = f"on-ds-{index:08d}"
        return Schedule(id=schedule_id_for(program, name), name=name, program=program, trigger=trigger,
                        properties={"experiment": f"exp-{index % 100}"}, enabled=True)


def leaves(schedule: Schedule) -> tuple[PartitionTrigger, ...]:
    trigger = schedule.trigger
    return trigger.all_of if isinstance(trigger, AndTrigger) else (trigger,)


def _notification(index: int, dataset: str) -> Notification:
    partition = PartitionRef({"hour": f"{index % 24:02d}"}, f"/data/{dataset}/{index}", 1024, 10)
    return Notification(f"n-{index:08d}", T0 + timedelta(seconds=index),
                        PartitionCommitted(NAMESPACE, dataset, (partition,)))
