"""The trigger-matcher's second stage: each schedule's pending job, in its own stream.

On the bus the first stage (`lookup.ScheduleLookup`) re-keys notifications by schedule id onto the
matches topic, so the member of the consumer group that owns a schedule's partition is its single
writer (the MATCHES batch handler). Its schedules' streams are appended through that partition's
batch stream (`decisions.partition_stream`): one record per partition and append. Triggers that time can satisfy (cron, quiet period, elapsed)
set one timer per schedule at the pending job's exact wake-up time; `fire_due()` runs what is due
by the injected clock, for the schedules this member owns."""
from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import OrderedDict
from dataclasses import dataclass
from typing import Mapping, NamedTuple
from datetime import datetime

from sluice.bus.port import Record, TopicPartition, kafka_partition
from sluice.bus.topics import JOBS, MATCHES, MATCHES_PARTITIONS, SCHEDULES
from sluice.clock import Clock
from sluice.domain import matching
from sluice.eventlog.batched import BATCH_TYPE, expand
from sluice.eventlog.codec import EventTypes
from sluice.domain.common import Notification
from sluice.domain.jobs import Job
from sluice.domain.matching import CheckTime, JobTriggered, MatcherState, MatchNotification, ObserveSchedule
from sluice.domain.schedules import Schedule
from sluice.eventlog.port import Checkpoint, EventLog, RecordedEvent, WrongExpectedVersion
from sluice.runtime.aggregates import AggregateStore, catch_up
from sluice.runtime.consumer import REPLAYED_FOR_HEADER, BatchHandler
from sluice.runtime.errors import MalformedMessage
from sluice.runtime.heap import collector_paused, freeze_built
from sluice.runtime.offsets import ConsumedOffsets
from sluice.runtime.outbox import Outgoing
from sluice.runtime.timers import run_timer_loop
from sluice.runtime.unit_of_work import ConsumingUnitOfWork, retry_on_conflict
from sluice.v1 import jobs_pb2, matching_pb2, notifications_pb2
from sluice.wire.common import notification_from_proto, parse_bus_message
from sluice.wire.job_json import job_message
from sluice.wire.jobs import job_proto_fields
from sluice.wire.sent_jobs import SentJobs
from sluice.wire.schedules import parse_schedule_change, schedule_from_proto
from sluice_services.matcher.decisions import PARTITION_STREAM_PREFIX, Decisions, partition_stream
from sluice_services.catalogue import MATCHER
from sluice_services.matcher.lookup import registered

GROUP = "trigger-matcher"
"""The consumer group of the matches and schedules topics (this stage)."""
STREAM_PREFIX, = MATCHER.stream_prefixes
SNAPSHOTS = MATCHER.snapshots
SNAPSHOT_VERSION = 2
"""The schema version of this service's snapshots (Loaded[MatcherState] per schedule stream): bump it when
MatcherState (or anything it holds) changes shape; a snapshot of another version is ignored and the
log folded instead."""
TYPES = EventTypes(matching.EVENTS)
FIRE_BATCH = 1000
"""Schedules whose timers are due at once share one append of at most this many schedules."""
FROZEN_AFTER_FIRES = 1000
"""A `fire_due` of at least this many fires freezes their survivors at its end (see there)."""
FIRED_KEPT = 131_072
"""Jobs fired and not routed yet kept for `sent_jobs` at most (~0.9 KB each, beside the notifications their
pending jobs held already): a minute's burst of crons is fired whole before the relay routes the first
(embedded mode), so a burst of 100,000 holds ~90 MB until it is routed; past this the oldest are routed from
their events."""
SHARED_NOTIFICATIONS = 1024
"""Notifications decoded once for all the schedules of a poll they concern (the first stage sends
one copy per matches partition): equal protobuf bytes give the same object, which pending jobs share."""


class MatchRequest(NamedTuple):
    """A notification for one schedule, with the schedule's definition when it is newer than the
    one this member knows (else None: not decoded at all). A tuple: one is made per schedule reached."""

    schedule_id: str
    notification: Notification
    schedule: Schedule | None = None


@dataclass(frozen=True)
class SourcePosition:
    """Where the first stage read a notification (`NotificationSource`)."""

    topic: str
    partition: int
    offset: int
    relay: str = ""
    """The outbox relay that published the notification ("": a producer's own)."""
    relay_position: int = 0
    """Its event's log position: increasing per relay and source partition."""


@dataclass(frozen=True)
class MatchRequests:
    """A record of the matches topic: a notification for the schedules of one partition."""

    requests: tuple[MatchRequest, ...]
    source: SourcePosition | None = None


@dataclass(frozen=True)
class FireDue:
    schedule_id: str


CHECK_TIME = CheckTime()

Command = ObserveSchedule | MatchRequests | FireDue
"""What this service decides on: its own commands, each turned into the aggregate's (`matching.MatcherCommand`)."""


class MatcherService:
    def __init__(self, log: EventLog, clock: Clock, sent_jobs: SentJobs | None = None) -> None:
        """`sent_jobs`: this process's consumers of the jobs topic take the jobs it routes from there."""
        self._log = log
        self._clock = clock
        self._sent_jobs = sent_jobs
        self._fired: OrderedDict[tuple[str, int], Job] = OrderedDict()
        """(stream, version) -> the job its JobTriggered fired, committed and not routed yet (with `sent_jobs`)."""
        self._store: AggregateStore[MatcherState] = AggregateStore(log, TYPES, matching.evolve, MatcherState(),
                                                                     clock=clock, snapshot=SNAPSHOTS[0],
                                                                     snapshot_version=SNAPSHOT_VERSION,
                                                                     batch_prefix=PARTITION_STREAM_PREFIX)
        self._offsets = ConsumedOffsets(log, "matcher")
        self._unit_of_work: ConsumingUnitOfWork[Command] = ConsumingUnitOfWork(
            self._offsets, self._run_once, self._reload, what="matcher", load=self._load_concerned, more=self._more)
        self._notifications: dict[bytes, Notification] = {}
        self._owned: set[int] | None = None
        """Partitions of the matches topic this member owns; None: every schedule (no consumer group)."""
        self._wake_at: dict[str, datetime] = {}
        self._timers: list[tuple[datetime, int, str]] = []
        """(wake-up time, order set, schedule id): a heap. Timers due at once fire in the order they were set: a
        burst visits the schedules' states in the order they were made (registered, or fired the last time), where
        by schedule id it visited them at random."""
        self._timers_set = itertools.count()
        self._partition_streams: dict[str, str] = {}
        """The partition stream of each schedule with a timer (`partition_stream`): a burst of fires does not hash
        every id again (kafka_partition's cache holds fewer ids than a large matcher has schedules, and a burst in
        the order timers were set missed it every time)."""
        self._timers_changed = asyncio.Event()

    def recover(self) -> None:
        self._offsets.clear()
        catch_up(self._log, self._store, STREAM_PREFIX, TYPES)
        self._wake_at.clear()
        self._partition_streams.clear()
        self._timers.clear()
        for stream, state in self._store.states().items():
            if state.schedule is not None:
                self._set_timer(stream.removeprefix(STREAM_PREFIX), state)

    def states(self) -> dict[str, MatcherState]:
        """Each schedule's state by schedule id (what `sluice replay matcher` shows)."""
        return {stream.removeprefix(STREAM_PREFIX): state for stream, state in self._store.states().items()}

    # -- bus handlers: each poll's records of a topic are decided together and appended at once ------

    def handlers(self) -> dict[str, BatchHandler]:
        return {SCHEDULES: BatchHandler(self.parse_schedule_change, self.apply),
                MATCHES: BatchHandler(self.parse_match_requested, self.apply)}

    parse_schedule_change = staticmethod(parse_schedule_change)

    def parse_match_requested(self, record: Record) -> MatchRequests:
        message = parse_bus_message(matching_pb2.MatchRequested, record.value)
        if not message.targets:
            raise MalformedMessage("targets: must name at least one schedule")
        notification = self._shared_notification(message.notification)
        requests = tuple(request for index, target in enumerate(message.targets)
                         if (request := self._match_request(target, notification, f"targets[{index}]")) is not None)
        if not message.HasField("source"):
            return MatchRequests(requests)
        source = message.source
        return MatchRequests(requests, SourcePosition(source.topic, source.partition, source.offset, source.relay,
                                                      source.relay_position))

    def _match_request(self, target: matching_pb2.MatchTarget, notification: Notification,
                       path: str) -> MatchRequest | None:
        """The target's request, with its definition when it is newer than the one known; None for a schedule
        named by its generation alone (`lookup._targets_fitting`) that was deleted since."""
        if not target.schedule_id:
            raise MalformedMessage(f"{path}.schedule_id: must not be empty")
        known = self._store.load(matching.stream_name(target.schedule_id)).state.schedule
        carried = target.HasField("schedule")
        generation = target.schedule.generation if carried else target.generation
        if not carried and known is None and generation <= 0:
            raise MalformedMessage(f"{path}: unknown schedule {target.schedule_id}")
        if known is not None and generation <= known.generation:
            return MatchRequest(target.schedule_id, notification)
        if carried:
            return MatchRequest(target.schedule_id, notification,
                                schedule_from_proto(target.schedule, target.schedule_id, f"{path}.schedule"))
        schedule = registered(self._log, target.schedule_id)
        if schedule is None:
            return None
        if schedule.generation < generation:
            raise MalformedMessage(f"{path}.generation: {generation} is not in the registry's stream of "
                                   f"schedule {target.schedule_id} (generation {schedule.generation})")
        return MatchRequest(target.schedule_id, notification, schedule)

    def _shared_notification(self, message: notifications_pb2.Notification) -> Notification:
        encoded = message.SerializeToString(deterministic=True)
        notification = self._notifications.get(encoded)
        if notification is None:
            notification = notification_from_proto(message)
            if len(self._notifications) >= SHARED_NOTIFICATIONS:
                del self._notifications[next(iter(self._notifications))]
            self._notifications[encoded] = notification
        return notification

    async def apply(self, items: list[tuple[Record, Command]]) -> None:
        """Decide on the commands of records not consumed before; the events and the consumed
        positions are appended together (sluice.runtime.unit_of_work: a redelivered record is
        skipped, also after a restart; positions another member recorded during a rebalance are
        read again). A MatchRequests record also records its source position (`_more`)."""
        try:
            self._unit_of_work.handle(items)
        finally:
            self._notifications.clear()

    def _load_concerned(self, items: list[tuple[Record, Command]]) -> None:
        for schedule_id in self._concerned(command for _, command in items):
            self._store.load(matching.stream_name(schedule_id))

    def _more(self, record: Record, command: Command, batch: Mapping[str, Checkpoint]) -> tuple[Checkpoint, ...] | None:
        """The source positions to record with a MatchRequests record (None: skip its command).

        - The source offset: a publisher sends each source partition's notifications in order, and the
          first stage starts again where it had committed, after it had published everything before; an
          offset this partition has passed is the first stage's resend. A notification handled as its own
          record (`fused`) has none: its position is the record's. One that the one member handled so is
          skipped here, as `handled_by_the_stages` skips the other way round (a log both compositions wrote).
        - The outbox relay's log position, for a notification a relay published: a relay publishes in
          position order, so one at or below the highest recorded for (relay, source partition) is the
          relay's resend after a crash between its send and its save (under a new source offset),
          however many it resent. A producer's own notification has none: a resend of it is recognised
          by its id among the schedule's last RECENT_PER_SCHEDULE (sluice.domain.matching)."""
        if not isinstance(command, MatchRequests) or command.source is None:
            return ()
        if record.header(REPLAYED_FOR_HEADER) == GROUP:
            return ()  # a dead letter of this stage replayed: never handled, whatever was recorded since
        source = command.source
        passed: tuple[Checkpoint, ...] = ()
        if source.topic != record.topic or source.partition != record.partition:
            if self._handled_by_one_member(source):
                return None
            offset = self._passed(_source_name(record, source), source.offset, batch)
            if offset is None:
                return None
            passed = (offset,)
        if not source.relay or source.relay_position <= 0:
            return passed
        relayed = self._passed(_relay_name(record, source), source.relay_position, batch)
        return None if relayed is None else (*passed, relayed)

    def handled_by_the_stages(self, schedule_id: str, source: SourcePosition) -> bool:
        """Whether the second stage handled this notification for the schedule's matches partition (by its
        source offset or its relay's position): a log the two stages wrote may hold it, and the one member
        reads it again after a stop between the first stage's publishing and its commit (`fused`)."""
        matches = TopicPartition(MATCHES, kafka_partition(schedule_id.encode(), MATCHES_PARTITIONS))
        return self._recorded(_source_name(matches, source), source.offset) or self._relay_recorded(matches, source)

    def _handled_by_one_member(self, source: SourcePosition) -> bool:
        """Whether the one member (`fused`) handled this notification as its own record."""
        own = TopicPartition(source.topic, source.partition)
        return self._recorded(self._offsets.name_of(own.topic, own.partition), source.offset) or \
            self._relay_recorded(own, source)

    def _recorded(self, name: str, value: int) -> bool:
        return value < self._offsets.next(name)

    def _relay_recorded(self, handled_on: TopicPartition, source: SourcePosition) -> bool:
        return bool(source.relay) and source.relay_position > 0 and \
            self._recorded(_relay_name(handled_on, source), source.relay_position)

    def _passed(self, name: str, value: int, batch: Mapping[str, Checkpoint]) -> Checkpoint | None:
        """The checkpoint `name` moved past `value`, or None when it is there already (recorded, or
        earlier in this batch): what comes before it was handled."""
        recorded = self._offsets.next(name)
        seen = batch.get(name)
        next_value = seen.value if seen is not None else recorded
        return Checkpoint(name, value + 1, expected=recorded) if value >= next_value else None

    def _concerned(self, commands) -> set[str]:
        found: set[str] = set()
        for command in commands:
            match command:
                case MatchRequests(requests, _):
                    found.update(request.schedule_id for request in requests)
                case ObserveSchedule(schedule_id, _):
                    found.add(schedule_id)
        return found

    def _run(self, commands: list[Command]) -> None:
        """`_run_once` without consumed positions (the timers), retried on a concurrent writer
        (sluice.runtime.unit_of_work's policy)."""
        retry_on_conflict(lambda: self._run_once(commands, []), self._reload, what="matcher")

    def _reload(self, conflict: WrongExpectedVersion) -> None:
        if self._store.is_batch(conflict.stream):  # another member wrote the partition: read what it decided
            self._store.follow_batch(conflict.stream)
        else:
            self._store.forget(conflict.stream)

    def _run_once(self, commands: list[Command], checkpoints: list[Checkpoint]) -> bool:
        """Decide every command in order, append all events with the checkpoints in one transaction
        (nothing when nothing was decided); whether it appended. Raises WrongExpectedVersion, having
        changed nothing."""
        decisions = Decisions(self._store, self._clock.now(), self._partition_streams)
        for command in commands:
            self._decide(decisions, command)
        if not decisions:
            return False
        versions = self._log.append_batch(decisions.appends(), checkpoints=checkpoints)
        for schedule_id, state in decisions.commit(versions):
            self._set_timer(schedule_id, state)
        if self._sent_jobs is not None:
            self._keep_fired(decisions.fired())
        return True

    def _keep_fired(self, fired: list[tuple[tuple[str, int], Job]]) -> None:
        kept = self._fired
        kept.update(fired)
        while len(kept) > FIRED_KEPT:  # a relay far behind routes the oldest from their events
            kept.popitem(last=False)

    def _decide(self, decisions: Decisions, command: Command) -> None:
        match command:
            case MatchRequests(requests, _):
                for request in requests:
                    self._decide_request(decisions, request)
            case FireDue(schedule_id):
                decisions.decide(schedule_id, CHECK_TIME)
            case ObserveSchedule(schedule_id, _):
                decisions.decide(schedule_id, command)
            case _:
                raise TypeError(f"unknown command {command!r}")

    @staticmethod
    def _decide_request(decisions: Decisions, request: MatchRequest) -> None:
        schedule_id, carried = request.schedule_id, request.schedule
        known = decisions.state(schedule_id).schedule
        if carried is not None and (known is None or carried.generation > known.generation):
            decisions.decide(schedule_id, ObserveSchedule(schedule_id, carried))  # not on the schedules topic yet
        decisions.decide(schedule_id, MatchNotification(request.notification))

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

    def fire_due(self) -> int:
        """Re-evaluate every pending job whose wake-up time has come, many schedules to one
        append (a catch-up that makes a job due again is taken in a next round); how many were due.
        The cyclic collector waits: a burst of fires makes every schedule's new state, which
        survives, and the collector walked the whole heap again and again meanwhile (the states
        are acyclic, freed by reference counting all the same). After a burst its survivors are
        frozen at once (sluice.runtime.heap.freeze_built): else the next handlers' collections walked
        them again until they reached the old generation, and a full collection walked them there."""
        now = self._clock.now()
        fired = 0
        with collector_paused():
            while due := self._pop_due(now):
                for start in range(0, len(due), FIRE_BATCH):
                    self._run([FireDue(schedule_id) for schedule_id in due[start:start + FIRE_BATCH]])
                fired += len(due)
            if fired >= FROZEN_AFTER_FIRES:
                freeze_built()
        return fired

    def _pop_due(self, now: datetime) -> list[str]:
        due = []
        while (when := self.next_wake_at()) is not None and when <= now:
            _, _, schedule_id = heapq.heappop(self._timers)
            del self._wake_at[schedule_id]
            if self.owns(schedule_id):  # else another member's now; a rebalance back makes this one re-read it
                due.append(schedule_id)
        return due

    def next_wake_at(self) -> datetime | None:
        """The earliest live timer: superseded entries on top of the heap are dropped (the timer
        loop asks after every change; a min over every schedule's timer cost O(schedules))."""
        while self._timers:
            when, _, schedule_id = self._timers[0]
            if self._wake_at.get(schedule_id) == when:
                return when
            heapq.heappop(self._timers)
        return None

    async def run_timers(self) -> None:
        await run_timer_loop(self._clock, self.fire_due, self.next_wake_at, self._timers_changed)

    def _set_timer(self, schedule_id: str, state: MatcherState) -> None:
        when = matching.wake_at(state, self._clock.now())
        if when is None:
            self._wake_at.pop(schedule_id, None)
            self._partition_streams.pop(schedule_id, None)
            return
        if schedule_id not in self._partition_streams:
            self._partition_streams[schedule_id] = partition_stream(schedule_id)
        if self._wake_at.get(schedule_id) != when:
            self._wake_at[schedule_id] = when
            heapq.heappush(self._timers, (when, next(self._timers_set), schedule_id))
            self._timers_changed.set()

    def route(self, recorded: RecordedEvent) -> list[Outgoing]:
        """A JobTriggered to the jobs topic: of a batch, or of a schedule's own stream (an older log)."""
        if not recorded.stream.startswith(STREAM_PREFIX) or recorded.type not in _ROUTED:
            return []
        outgoing, fired = [], self._fired
        for event in expand(recorded, _FIRES):
            if event.type != JobTriggered.__name__:
                continue
            job = fired.pop((event.stream, event.version), None) if fired else None
            if job is not None:
                value = jobs_pb2.JobTriggered(job=job_proto_fields(job)).SerializeToString()
                self._sent_jobs.sent(value, job)
                outgoing.append(Outgoing(JOBS, job.schedule_id, value))
            else:
                message = job_message(event, TYPES, jobs_pb2.JobTriggered)
                outgoing.append(Outgoing(JOBS, message.job.schedule_id, message.SerializeToString()))
        return outgoing


_ROUTED = frozenset({BATCH_TYPE, JobTriggered.__name__})
_FIRES = frozenset({JobTriggered.__name__})


def _source_name(record: Record | TopicPartition, source: SourcePosition) -> str:
    return f"matcher:{record.topic}:{record.partition}:from:{source.topic}:{source.partition}"


def _relay_name(record: Record | TopicPartition, source: SourcePosition) -> str:
    return f"matcher:{record.topic}:{record.partition}:relay:{source.relay}:{source.topic}:{source.partition}"

