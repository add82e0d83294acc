"""replay: how fast the event log replays, and how long a restart takes, on a log of N events.

The log (SQLite file, default N = 1,000,000) holds what the matcher and the checker write for
S schedules with partition triggers (count 1..3) over D datasets: each notification matched by
every schedule listening to its dataset (one event per decision in `matcher-<schedule>`:
NotificationMatched, the first one creating the job, or JobTriggered), each triggered job queued and admitted in `checker-queue` (the one stream
that grows forever). The matcher's events are in streams of their own, as a log written before its batch
records holds them (`sluice.eventlog.batched`; recovery folds both alike). The events come from the domain's own decide/evolve, so recovery folds real
history. Generating it is not timed; the file is kept under the temp dir, keyed by N and the
generator's version, and reused by later runs (delete it to regenerate).

Figures:
- replay_events_per_s: read_all in pages of 10,000, each row decoded into a RecordedEvent (what a
  subscriber, the outbox relay or `sluice log` consume) (target 100,000).
- replay_decoded_events_per_s: the same, each event's JSON also decoded into its domain dataclass
  (what a fold needs on top).
- restart_to_ready_with_snapshots_s: a fresh connection, then matcher and checker recovery, with
  snapshots taken SNAPSHOT_EVERY events before the head (the most a periodic snapshot can lag)
  (target 2 at 1,000,000 events).
- restart_to_ready_without_snapshots_s: the same recovery folding the whole log.

N is 200,000 by default (a few minutes to generate the first time on a loaded 2-core machine);
--full or BENCH_EVENTS=1000000 is the issue's size. BENCH_EVENTS sets any N.
"""
from __future__ import annotations

import random
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from bench import Figure, option, progress
from sluice.clock import SimulatedClock
from sluice.domain import checking, matching
from sluice.eventlog.codec import EventTypes, encode
from sluice.domain.common import Notification, PartitionCommitted, PartitionRef, ProgramRef
from sluice.domain.constraints import UNLIMITED
from sluice.domain.schedules import Schedule
from sluice.domain.triggers import PartitionTrigger
from sluice.eventlog.port import NO_STREAM, NewEvent, StreamAppend
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.eventlog.truncated import LogUntil
from sluice.ids import derived_id
from sluice.runtime import snapshots

DESCRIPTION = ("raw replay of an N-event log (events/s; --full: 1,000,000) and restart to ready with and without "
               "snapshots (s)")
DEFAULT_EVENTS = 200_000
FULL_EVENTS = 1_000_000
GENERATOR_VERSION = 2
SCHEDULES_PER_1000_EVENTS = 2
"""2,000 schedules at 1,000,000 events."""
DATASETS_PER_SCHEDULE = 0.25
PAGE = 10_000
WRITE_BATCH = 5_000
TARGET_REPLAY = 100_000
TARGET_RESTART = 2.0
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
TYPES = EventTypes((*matching.EVENTS, *checking.EVENTS))


def run(options: object) -> list[Figure]:
    events = FULL_EVENTS if getattr(options, "full", False) else option(options, "events", DEFAULT_EVENTS)
    path = _generated(events)
    replay_rate = _replay_rate(path, decode=False)
    decoded_rate = _replay_rate(path, decode=True)
    without = _restart(path, snapshots_lag=None)
    with_snapshots = _restart(path, snapshots_lag=snapshots.SNAPSHOT_EVERY)
    return [
        Figure("replay_events_per_s", replay_rate, "events/s", TARGET_REPLAY),
        Figure("replay_decoded_events_per_s", decoded_rate, "events/s"),
        Figure("restart_to_ready_with_snapshots_s", with_snapshots, "s", TARGET_RESTART),
        Figure("restart_to_ready_without_snapshots_s", without, "s"),
    ]


def _replay_rate(path: Path, decode: bool) -> float:
    log = SqliteEventLog(path)
    try:
        started, count, after = time.perf_counter(), 0, 0
        while page := log.read_all(after, PAGE):
            if decode:
                for recorded in page:
                    TYPES.decode(recorded)
            count += len(page)
            after = page[-1].position
        return count / (time.perf_counter() - started)
    finally:
        log.close()


class _LogAsOf(LogUntil):
    """The log as it was at a position, keeping its snapshots in the real log: where a restart long
    ago left its snapshots."""

    def save_snapshot(self, snapshot) -> None:
        self._log.save_snapshot(snapshot)

    def read_snapshot(self, name: str):
        return self._log.read_snapshot(name)

    def delete_snapshot(self, name: str) -> bool:
        return self._log.delete_snapshot(name)


def _restart(path: Path, snapshots_lag: int | None) -> float:
    """Seconds from opening the log to matcher and checker recovered (snapshots `snapshots_lag` events
    behind the head, or none)."""
    from sluice_services.cli.rebuild import rebuild

    log = SqliteEventLog(path)
    try:
        if snapshots_lag is not None:
            at = _position_before_head(log, snapshots_lag)
            for service in ("matcher", "checker"):
                rebuild(service, _LogAsOf(log, at))
    finally:
        log.close()
    started = time.perf_counter()
    log = SqliteEventLog(path)
    try:
        recovered_log = log if snapshots_lag is not None else LogUntil(log, log.head_position())
        matcher, checker = _services(recovered_log)
        matcher.recover()
        checker.recover()
        elapsed = time.perf_counter() - started
        progress(f"[replay] restart {'with' if snapshots_lag is not None else 'without'} snapshots: "
                 f"{len(matcher.states())} schedules, {len(checker.state.schedules)} tracked, {elapsed:.2f} s")
        return elapsed
    finally:
        log.close()


def _services(log):
    from sluice_services.checker.service import CheckerService
    from sluice_services.matcher.service import MatcherService

    clock = SimulatedClock(T0 + timedelta(days=365))
    return MatcherService(log, clock), CheckerService(log, clock)


def _position_before_head(log: SqliteEventLog, events: int) -> int:
    head = log.head_position()
    page = log.read_all(max(0, head - events - 1), 1)
    return page[0].position if page else 0


# -- generating the log ----------------------------------------------------------------------------

def _generated(events: int) -> Path:
    path = Path(tempfile.gettempdir()) / f"sluice-bench-replay-v{GENERATOR_VERSION}-{events}.db"
    if path.exists():
        log = SqliteEventLog(path)
        try:
            if log.head_position() >= events:
                return path
        finally:
            log.close()
        path.unlink()
    progress(f"[replay] generating a log of {events:,} events at {path} (not timed; kept for later runs)")
    started = time.perf_counter()
    partial = path.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    log = SqliteEventLog(partial)
    try:
        _History(log, events).write()
    finally:
        log.close()
    partial.rename(path)
    progress(f"[replay] generated in {time.perf_counter() - started:.0f} s")
    return path


class _History:
    def __init__(self, log: SqliteEventLog, events: int) -> None:
        self._log = log
        self._target = events
        self._random = random.Random(events)
        schedules = max(10, events * SCHEDULES_PER_1000_EVENTS // 1000)
        datasets = max(3, int(schedules * DATASETS_PER_SCHEDULE))
        self._datasets = [f"feed{index}" for index in range(datasets)]
        self._schedules = [Schedule(f"schedule-{index:06d}", f"s{index}", ProgramRef("bench", "app", f"p{index % 50}"),
                                    PartitionTrigger("bench", self._datasets[index % datasets], 1 + index % 3),
                                    enabled=True) for index in range(schedules)]
        self._listening: dict[str, list[Schedule]] = {}
        for schedule in self._schedules:
            self._listening.setdefault(schedule.trigger.dataset, []).append(schedule)
        self._matcher: dict[str, matching.MatcherState] = {}
        self._checker = checking.CheckerState()
        self._versions: dict[str, int] = {}
        self._pending: dict[str, list[NewEvent]] = {}
        self._pending_count = 0
        self._written = 0
        self._now = T0

    def write(self) -> None:
        for schedule in self._schedules:
            self._decide_matcher(schedule.id, matching.ObserveSchedule(schedule.id, schedule))
            self._decide_checker([checking.ObserveSchedule(schedule.id, schedule)])
        hour = 0
        while self._written + self._pending_count < self._target:
            self._now += timedelta(seconds=7)
            dataset = self._random.choice(self._datasets)
            hour += 1
            partition = PartitionRef({"hour": str(hour)}, f"/data/bench/{dataset}/{hour}", 1000)
            notification = Notification(f"n{hour}", self._now, PartitionCommitted("bench", dataset, (partition,)))
            for schedule in self._listening.get(dataset, ()):
                for event in self._decide_matcher(schedule.id, matching.MatchNotification(notification)):
                    if isinstance(event, matching.JobTriggered):
                        self._decide_checker([checking.EnqueueJob(event.job)])
            if self._pending_count >= WRITE_BATCH:
                self._flush()
        self._flush()

    def _decide_matcher(self, schedule_id: str, command: object) -> list:
        state = self._matcher.get(schedule_id, matching.MatcherState())
        events = matching.decide(state, command, self._now)
        for event in events:
            state = matching.evolve(state, event)
        self._matcher[schedule_id] = state
        self._add(matching.stream_name(schedule_id), events)
        return events

    def _decide_checker(self, commands: list) -> None:
        events, _ = checking.decide_admitting(self._checker, commands, self._now, UNLIMITED)
        for event in events:
            self._checker = checking.evolve(self._checker, event)
        self._add(checking.QUEUE_STREAM, events)

    def _add(self, stream: str, events: list) -> None:
        version = self._versions.get(stream, NO_STREAM)
        pending = self._pending.setdefault(stream, [])
        for event in events:
            version += 1
            pending.append(encode(event, derived_id(stream, str(version))))
        self._versions[stream] = version
        self._pending_count += len(events)

    def _flush(self) -> None:
        appends = [StreamAppend(stream, events, self._versions[stream] - len(events))
                   for stream, events in self._pending.items() if events]
        if appends:
            self._log.append_batch(appends)
        self._written += self._pending_count
        self._pending, self._pending_count = {}, 0
        if self._written // 100_000 != (self._written - WRITE_BATCH) // 100_000:
            progress(f"[replay]   {self._written:,} events")
