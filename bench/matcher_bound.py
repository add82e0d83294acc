"""matcher-bound: the most a matcher that decides per (notification, schedule) can do in this interpreter.

The `matcher` benchmark's workload and records (bench.matcher.Workload: partition triggers of
count 1..3, a fifth of them ANDs over two datasets; one MatchRequested per notification and
matches partition) go through the least such a matcher must do, written as tight as plain
Python allows: parse each record, and for each target schedule skip a notification it matched
recently (8-byte digests), add the notification's partitions to the leaf's count, note the
notification for the job's context and fire when every leaf reached its count; then append one
event per poll and matches partition (the poll's notifications once, the matches, the fires) to
the SQLite event log in one transaction. No event objects, no trigger context, no schedule
generations, no snapshots, no timers, no consumed offsets: the product matcher does all of
this on top, so this figure bounds it from above.

Figures: notifications_per_s (the target is issue 3's 20,000; the `matcher` benchmark runs this on
its own records and prints its ratio to it, `ratio_to_bound`), and
where the time goes: decide_us_per_request (per notification and schedule), parse_us and
append_us per notification. `--full` is the issue's size (100,000 schedules over 10,000
datasets, 200,000 notifications).
"""
from __future__ import annotations

import hashlib
import tempfile
import time
from pathlib import Path

import orjson

from bench import Figure, option, progress
from bench.matcher import (DEFAULT_DATASETS, DEFAULT_NOTIFICATIONS, DEFAULT_SCHEDULES, FULL_DATASETS,
                           FULL_NOTIFICATIONS, FULL_SCHEDULES, Workload, leaves)
from sluice.eventlog.port import ANY_VERSION, NewEvent, StreamAppend
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.v1 import matching_pb2

DESCRIPTION = ("the ceiling of a per-schedule matcher in plain Python on the matcher benchmark's records "
               "(parse, count, fire, one event per poll and partition): notifications/s")
RECENT_BYTES = 16 * 8


def run(options: object) -> list[Figure]:
    full = bool(getattr(options, "full", False))
    schedules = option(options, "schedules", FULL_SCHEDULES if full else DEFAULT_SCHEDULES)
    datasets = max(2, min(option(options, "datasets", FULL_DATASETS if full else DEFAULT_DATASETS), schedules))
    notifications = option(options, "notifications", FULL_NOTIFICATIONS if full else DEFAULT_NOTIFICATIONS)
    workload = Workload(schedules, datasets, getattr(options, "seed", 42))
    polls = [poll for chunk in workload.match_polls(notifications) for poll in chunk]
    with tempfile.TemporaryDirectory(prefix="sluice-bench-matcher-bound-") as tmp:
        log = SqliteEventLog(Path(tmp) / "events.db")
        try:
            matcher = CountingMatcher(workload, log)
            for poll in polls:
                matcher.apply(poll)
        finally:
            log.close()
    total = matcher.parsing + matcher.deciding + matcher.appending
    progress(f"[matcher-bound] {notifications} notifications, {workload.requests} requests, {matcher.fires} fires "
             f"in {total:.2f} s: parse {matcher.parsing:.2f} s, decide {matcher.deciding:.2f} s, "
             f"append {matcher.appending:.2f} s")
    return [
        Figure("notifications_per_s", notifications / total, "notifications/s", 20000),
        Figure("decide_us_per_request", matcher.deciding / workload.requests * 1e6, "us", None),
        Figure("parse_us_per_notification", matcher.parsing / notifications * 1e6, "us", None),
        Figure("append_us_per_notification", matcher.appending / notifications * 1e6, "us", None),
    ]


class CountingMatcher:
    """Per schedule a list: [jobs fired, counts per leaf, notifications of the pending job,
    recent digests, leaf index by dataset, counts needed per leaf]."""

    def __init__(self, workload: Workload, log: SqliteEventLog) -> None:
        self._log = log
        self._leaves = {}
        for schedule in workload.schedules:
            of_schedule = leaves(schedule)
            self._leaves[schedule.id] = ({leaf.dataset: i for i, leaf in enumerate(of_schedule)},
                                         [leaf.count for leaf in of_schedule])
        self._states: dict[str, list] = {}
        self.parsing = self.deciding = self.appending = 0.0
        self.fires = 0

    def apply(self, poll: list) -> None:
        started = time.perf_counter()
        requests = []
        for record in poll:
            message = matching_pb2.MatchRequested.FromString(record.value)
            notification = message.notification
            committed = notification.partition_committed
            requests.append((record.partition, record.offset, notification.id, committed.dataset,
                             len(committed.partitions), notification.SerializeToString(),
                             [target.schedule_id for target in message.targets]))
        parsed = time.perf_counter()
        decided = self._decide(requests)
        deciding = time.perf_counter()
        self._log.append_batch([
            StreamAppend(f"matcher-partition-{partition}", [NewEvent(
                f"matches-{partition}-{first_offset}", "MatchesDecided",
                orjson.dumps({"notifications": [raw.hex() for raw in notifications], "matched": matched,
                              "fired": fired}))], ANY_VERSION)
            for partition, (first_offset, notifications, matched, fired) in decided.items()])
        appended = time.perf_counter()
        self.parsing += parsed - started
        self.deciding += deciding - parsed
        self.appending += appended - deciding

    def _decide(self, requests: list) -> dict[int, tuple[int, list, list, list]]:
        """Per matches partition: its first offset in the poll, the notifications, the matches
        (schedule, notification index), the fires (schedule, job number)."""
        states, by_schedule, blake2b = self._states, self._leaves, hashlib.blake2b
        decided: dict[int, tuple[int, list, list, list]] = {}
        for partition, offset, notification_id, dataset, partitions, raw, schedule_ids in requests:
            record = decided.get(partition)
            if record is None:
                record = decided[partition] = (offset, [], [], [])
            _, notifications, matched, fired = record
            index = len(notifications)
            notifications.append(raw)
            digest = blake2b(notification_id.encode(), digest_size=8).digest()
            for schedule_id in schedule_ids:
                state = states.get(schedule_id)
                if state is None:
                    by_dataset, needed = by_schedule[schedule_id]
                    state = states[schedule_id] = [0, [0] * len(needed), [], b"", by_dataset, needed]
                recent = state[3]
                if digest in recent:
                    continue
                state[3] = recent[-(RECENT_BYTES - 8):] + digest
                state[2].append(index)
                matched.append((schedule_id, index))
                counts, needed = state[1], state[5]
                counts[state[4][dataset]] += partitions
                if counts[0] >= needed[0] and (len(counts) == 1 or counts[1] >= needed[1]):
                    state[0] += 1
                    fired.append((schedule_id, state[0]))
                    self.fires += 1
                    state[1], state[2] = [0] * len(counts), []
        return decided
