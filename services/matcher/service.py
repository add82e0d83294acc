"""The trigger-matcher's second stage: each schedule's pending job, in its own stream.

On the bus the first stage (`lookup.ScheduleLookup`) re-keys notifications by schedule id onto the
matches topic, so the member of the consumer group that owns a schedule's partition is its single
writer (`on_match_requested`). `match()` also looks schedules up itself, for callers without a
bus (the simulated scheduler, benchmarks). Triggers that time can satisfy (cron, quiet period,
elapsed) set one timer per schedule at the pending job's exact wake-up time; `fire_due()` runs
what is due by the injected clock, for the schedules this member owns."""
from __future__ import annotations

import asyncio
import heapq
from collections import OrderedDict, defaultdict
from datetime import datetime

from sluice.bus.port import Record, TopicPartition, kafka_partition
from sluice.bus.topics import ALL_TOPICS, JOBS, MATCHES
from sluice.clock import Clock
from sluice.domain import matching
from sluice.domain.codec import EventTypes
from sluice.domain.common import Notification
from sluice.domain import triggers
from sluice.domain.matching import (
    CheckTime,
    JobCreated,
    JobTriggered,
    MatcherState,
    MatchNotification,
    NotificationMatched,
    ObserveSchedule,
)
from sluice.domain.schedules import Schedule
from sluice.eventlog.port import Checkpoint, EventLog, RecordedEvent
from sluice.runtime.aggregates import AggregateStore, catch_up, execute, execute_batch
from sluice.runtime.errors import InvalidArgument, MalformedMessage
from sluice.runtime.outbox import Outgoing
from sluice.v1 import jobs_pb2, matching_pb2, schedules_pb2
from sluice.wire.common import notification_from_bytes, notification_from_proto, parse_bus_message
from sluice.wire.jobs import job_to_proto
from sluice.wire.schedules import schedule_from_proto

STREAM_PREFIX = "matcher-"
SNAPSHOTS = ("matcher",)
TYPES = EventTypes(matching.EVENTS)
MAX_TIMER_SLEEP = 1.0
"""Seconds the timer loop sleeps at most, so a clock that jumps (or a simulated one) is noticed."""
RECENT_NOTIFICATIONS = 100_000
"""How many (schedule, notification) pairs that had an effect are remembered, to ignore a resend."""
FIRE_BATCH = 1000
"""Schedules whose timers are due at once share one append of at most this many streams."""
MATCHES_PARTITIONS = next(spec.partitions for spec in ALL_TOPICS if spec.name == MATCHES)


class MatcherService:
    def __init__(self, log: EventLog, clock: Clock) -> None:
        self._log = log
        self._clock = clock
        self._store: AggregateStore[MatcherState] = AggregateStore(log, TYPES, matching.evolve, MatcherState(),
                                                                     snapshot=SNAPSHOTS[0])
        self._index: dict[str, set[str]] = defaultdict(set)
        self._recent: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._job_schedules: dict[str, str] = {}
        self._owned: set[int] | None = None
        """Partitions of the matches topic this member owns; None: every schedule (no consumer group)."""
        self._next_offsets: dict[str, int] = {}
        self._wake_at: dict[str, datetime] = {}
        self._timers: list[tuple[datetime, str]] = []
        self._timers_changed = asyncio.Event()

    def recover(self) -> None:
        self._recent.clear()
        self._next_offsets.clear()
        catch_up(self._log, self._store, STREAM_PREFIX, TYPES, on_event=self._remember_matched)
        self._job_schedules.clear()
        self._index.clear()
        self._wake_at.clear()
        self._timers.clear()
        for stream, state in self._store.states().items():
            if state.schedule is not None:
                self._index_schedule(state.schedule)
                self._set_timer(stream.removeprefix(STREAM_PREFIX), state)

    def states(self) -> dict[str, MatcherState]:
        """Each schedule's state by schedule id (what `sluice replay matcher` shows)."""
        return {stream.removeprefix(STREAM_PREFIX): state for stream, state in self._store.states().items()}

    def schedules_for(self, event_key: str) -> set[str]:
        return set(self._index.get(event_key, ()))

    async def on_schedule_changed(self, record: Record) -> None:
        change = parse_bus_message(schedules_pb2.ScheduleChanged, record.value)
        if not change.schedule_id:
            raise MalformedMessage("schedule_id: must not be empty")
        schedule = None if change.deleted else schedule_from_proto(change.schedule, change.schedule_id)
        self.observe(change.schedule_id, schedule)

    def observe(self, schedule_id: str, schedule: Schedule | None) -> None:
        previous = self._store.load(matching.stream_name(schedule_id)).state.schedule
        self._decide(schedule_id, ObserveSchedule(schedule_id, schedule))
        if previous is not None:
            self._unindex_schedule(previous)
        if schedule is not None:
            self._index_schedule(schedule)

    async def on_notification(self, record: Record) -> None:
        """The consumed offset is stored with the events it caused, so a redelivery is skipped."""
        consumed = f"matcher:{record.topic}:{record.partition}"
        if record.offset < self._next_offset(consumed):
            return
        try:
            notification = notification_from_bytes(record.value)
        except InvalidArgument as error:
            raise MalformedMessage(str(error)) from error
        self.match(notification, Checkpoint(consumed, record.offset + 1))

    async def on_match_requested(self, record: Record) -> None:
        """The first stage found that the notification concerns the schedule (keyed by its id)."""
        consumed = f"matcher:{record.topic}:{record.partition}"
        if record.offset < self._next_offset(consumed):
            return
        message = parse_bus_message(matching_pb2.MatchRequested, record.value)
        if not message.schedule_id:
            raise MalformedMessage("schedule_id: must not be empty")
        known = self._store.load(matching.stream_name(message.schedule_id)).state.schedule
        if not message.HasField("schedule") and known is None:
            raise MalformedMessage(f"unknown schedule {message.schedule_id}")
        try:
            notification = notification_from_proto(message.notification)
            carried = schedule_from_proto(message.schedule, message.schedule_id) if message.HasField("schedule") else None
        except InvalidArgument as error:
            raise MalformedMessage(str(error)) from error
        if carried is not None and (known is None or carried.generation > known.generation):
            self.observe(message.schedule_id, carried)  # the schedules topic has not brought it yet
        self.match(notification, Checkpoint(consumed, record.offset + 1), schedule_ids=[message.schedule_id])

    def on_assignment(self, assigned: set[TopicPartition]) -> None:
        """The consumer group gave this member these partitions: it fires the timers of the
        schedules on its partitions of the matches topic, after re-reading what other members wrote."""
        owned = {tp.partition for tp in assigned if tp.topic == MATCHES}
        first, gained = self._owned is None, owned - (self._owned or set())
        self._owned = owned
        if gained and not first:  # at the first assignment, the start-up recovery is fresh
            self.recover()

    def owns(self, schedule_id: str) -> bool:
        return self._owned is None or kafka_partition(schedule_id.encode(), MATCHES_PARTITIONS) in self._owned

    def match(self, notification: Notification, consumed: Checkpoint | None = None,
              schedule_ids: list[str] | None = None) -> None:
        """Every schedule the notification concerns (looked up, or `schedule_ids`) decides; all
        their events are appended at once, with the consumed position."""
        now = self._clock.now()
        command = MatchNotification(notification)
        if schedule_ids is None:
            schedule_ids = sorted(self.schedules_for(notification.event_key()))
        streams = [matching.stream_name(s) for s in schedule_ids if (s, notification.id) not in self._recent]
        decided = execute_batch(self._store, self._log, streams, lambda _, state: matching.decide(state, command, now),
                                checkpoints=[consumed] if consumed else [])
        if decided:
            if consumed:
                self._next_offsets[consumed.name] = consumed.value
            for stream in decided:
                schedule_id = stream.removeprefix(STREAM_PREFIX)
                self._remember(schedule_id, notification.id)
                self._set_timer(schedule_id, self._store.load(stream).state)

    def fire_due(self) -> int:
        """Re-evaluate every pending job whose wake-up time has come, many schedules to one
        append (a catch-up that makes a job due again is taken in a next round); how many were due."""
        now = self._clock.now()
        fired = 0
        while due := self._pop_due(now):
            for start in range(0, len(due), FIRE_BATCH):
                streams = [matching.stream_name(schedule_id) for schedule_id in due[start:start + FIRE_BATCH]]
                execute_batch(self._store, self._log, streams, lambda _, state: matching.decide(state, CheckTime(), now))
                for stream in streams:
                    self._set_timer(stream.removeprefix(STREAM_PREFIX), self._store.load(stream).state)
            fired += len(due)
        return fired

    def _pop_due(self, now: datetime) -> list[str]:
        due = []
        while self._timers and self._timers[0][0] <= now:
            when, schedule_id = heapq.heappop(self._timers)
            if self._wake_at.get(schedule_id) != when:
                continue  # superseded by a later decision
            del self._wake_at[schedule_id]
            if self.owns(schedule_id):  # else another member's now; a rebalance back makes this one re-read it
                due.append(schedule_id)
        return due

    def next_wake_at(self) -> datetime | None:
        return min(self._wake_at.values(), default=None)

    async def run_timers(self) -> None:
        while True:
            self.fire_due()
            self._timers_changed.clear()
            next_at = self.next_wake_at()
            delay = MAX_TIMER_SLEEP if next_at is None else (next_at - self._clock.now()).total_seconds()
            try:
                await asyncio.wait_for(self._timers_changed.wait(), max(0.0, min(delay, MAX_TIMER_SLEEP)))
            except TimeoutError:
                pass

    def _set_timer(self, schedule_id: str, state: MatcherState) -> None:
        when = matching.wake_at(state, self._clock.now())
        if when is None:
            self._wake_at.pop(schedule_id, None)
            return
        if self._wake_at.get(schedule_id) != when:
            self._wake_at[schedule_id] = when
            heapq.heappush(self._timers, (when, schedule_id))
            self._timers_changed.set()

    def _next_offset(self, checkpoint: str) -> int:
        if checkpoint not in self._next_offsets:
            self._next_offsets[checkpoint] = self._log.read_checkpoint(checkpoint) or 0
        return self._next_offsets[checkpoint]

    def _remember_matched(self, event: object) -> None:
        if isinstance(event, JobCreated):
            self._job_schedules[event.job_id] = event.schedule_id
        elif isinstance(event, NotificationMatched):
            self._remember(self._job_schedules.get(event.job_id, ""), event.notification.id)

    def _remember(self, schedule_id: str, notification_id: str) -> None:
        key = (schedule_id, notification_id)
        self._recent[key] = None
        self._recent.move_to_end(key)
        if len(self._recent) > RECENT_NOTIFICATIONS:
            self._recent.popitem(last=False)

    def route(self, recorded: RecordedEvent) -> list[Outgoing]:
        if recorded.type != JobTriggered.__name__ or not recorded.stream.startswith(STREAM_PREFIX):
            return []
        event: JobTriggered = TYPES.decode(recorded)
        message = jobs_pb2.JobTriggered(job=job_to_proto(event.job))
        return [Outgoing(JOBS, event.job.schedule_id, message.SerializeToString())]

    def _decide(self, schedule_id: str, command: object) -> None:
        now = self._clock.now()
        state, _ = execute(self._store, self._log, matching.stream_name(schedule_id),
                           lambda s: matching.decide(s, command, now))
        self._set_timer(schedule_id, state)

    def _index_schedule(self, schedule: Schedule) -> None:
        for key in triggers.event_keys(schedule.trigger):
            self._index[key].add(schedule.id)

    def _unindex_schedule(self, schedule: Schedule) -> None:
        for key in triggers.event_keys(schedule.trigger):
            self._index[key].discard(schedule.id)
