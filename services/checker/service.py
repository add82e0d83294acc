"""The constraint-checker: keeps triggered jobs until their run constraints hold, then asks the
launcher to launch them. Its queue and its world of runs are one aggregate (`checker-queue`)."""
from __future__ import annotations

import asyncio
from datetime import datetime

from sluice.bus.port import Record
from sluice.bus.topics import JOBS, LAUNCH_REQUESTS, PROGRAM_NOTIFICATIONS, SCHEDULES
from sluice.clock import Clock
from sluice.domain import checking
from sluice.domain.checking import (
    QUEUE_STREAM,
    CheckerCommand,
    CheckerState,
    CheckTime,
    EnqueueJob,
    JobAdmitted,
    JobsAdmitted,
    ObserveRun,
)
from sluice.eventlog.codec import EventTypes
from sluice.domain.common import ProgramStatusChanged
from sluice.domain.backfills import CancelBackfill, RunScheduleNow, StartBackfill
from sluice.domain.constraints import UNLIMITED, Capacity, Waiting
from sluice.domain.schedules import Schedule
from sluice.eventlog.port import Checkpoint, EventLog, RecordedEvent, WrongExpectedVersion
from sluice.runtime.aggregates import AggregateStore, attempt_batch, forget_conflicting
from sluice.runtime.consumer import REPLAYED_FOR_HEADER, BatchHandler
from sluice.runtime.errors import MalformedMessage
from sluice.runtime.heap import built_then_frozen
from sluice.runtime.offsets import ConsumedOffsets
from sluice.runtime.outbox import Outgoing
from sluice.runtime.timers import run_timer_loop
from sluice.runtime.unit_of_work import ConsumingUnitOfWork, retry_on_conflict
from sluice.v1 import jobs_pb2
from sluice.wire.common import notification_from_bytes
from sluice.wire.job_json import job_message, jobs_messages
from sluice.wire.sent_jobs import SentJobs, job_received
from sluice.wire.schedules import parse_schedule_change
from sluice_services.catalogue import CHECKER
from sluice_services.checker.arrived import ArrivedJobs

GROUP = "constraint-checker"
"""The consumer group of the jobs, schedules and program notification topics."""
TYPES = EventTypes(checking.EVENTS)
Requested = RunScheduleNow | StartBackfill | CancelBackfill
SNAPSHOTS = CHECKER.snapshots
FROZEN_AFTER_COMMANDS = 100
"""A poll of at least this many commands is decided with the cyclic collector paused, and what survived it
frozen (see `apply`)."""
SNAPSHOT_VERSION = 4
"""The schema version of this service's snapshots (the queue stream's Loaded[CheckerState]): bump it when
CheckerState (or anything it holds) changes shape; a snapshot of another version is ignored and the
log folded instead."""


def snapshot_size(state: CheckerState) -> int:
    """The entries a snapshot of the queue stream packs: a snapshot waits for as many events."""
    return len(state.schedules) + len(state.queue)


class CheckerService:
    def __init__(self, log: EventLog, clock: Clock, capacity: Capacity = UNLIMITED,
                 sent_jobs: SentJobs | None = None) -> None:
        """`sent_jobs`: the jobs a matcher of this process routed, taken instead of parsed."""
        self._log = log
        self._sent_jobs = sent_jobs
        self._clock = clock
        self._capacity = capacity
        self._store: AggregateStore[CheckerState] = AggregateStore(log, TYPES, checking.evolve, CheckerState(),
                                                                     clock=clock, snapshot=SNAPSHOTS[0],
                                                                     size=snapshot_size,
                                                                     snapshot_version=SNAPSHOT_VERSION)
        self._offsets = ConsumedOffsets(log, "checker")
        self._unit_of_work: ConsumingUnitOfWork[CheckerCommand] = ConsumingUnitOfWork(
            self._offsets, self._decide, self._reload, what=QUEUE_STREAM)
        self._wake_at: datetime | None = None
        self._settled: checking.Settled | None = None
        """What the passes since the last full one settled (decide_admitting); None: the next is full."""
        self._timers_changed = asyncio.Event()
        self._decided: list[checking.CheckerEvent] = []
        """The events of the last decision appended (`request` answers from them)."""
        self._arrived = ArrivedJobs()

    def recover(self) -> None:
        self._store.restore()  # the queue's last snapshot; its first load reads the stream after it
        self._offsets.clear()
        self._settled = None
        self._set_timer(self.state)

    @property
    def state(self) -> CheckerState:
        return self._store.load(QUEUE_STREAM).state

    def handlers(self) -> dict[str, BatchHandler]:
        """The bus handlers: each poll's messages of a topic are one decision and one append."""
        return {SCHEDULES: BatchHandler(self.parse_schedule_change, self.apply),
                PROGRAM_NOTIFICATIONS: BatchHandler(self.parse_program_status, self.apply),
                JOBS: BatchHandler(self.parse_job_triggered, self.apply)}

    def parse_job_triggered(self, record: Record) -> EnqueueJob:
        job = job_received(record.value, self._sent_jobs)
        self._arrived.keep(job, record.value)
        return EnqueueJob(job, record.header(REPLAYED_FOR_HEADER) == GROUP)

    @staticmethod
    def parse_program_status(record: Record) -> ObserveRun:
        notification = notification_from_bytes(record.value)
        status = notification.payload
        if not isinstance(status, ProgramStatusChanged):
            raise MalformedMessage(f"expected a program status notification, got {type(status).__name__}")
        return ObserveRun(status.program, status.run_id, status.status, notification.time)

    parse_schedule_change = staticmethod(parse_schedule_change)

    async def apply(self, items: list[tuple[Record, CheckerCommand]]) -> None:
        """The poll's commands of records not consumed before, decided and appended with their consumed
        positions (sluice.runtime.unit_of_work). A large poll (a burst of fires) leaves hundreds of jobs in
        the state, which survive: it is decided as a burst (sluice.runtime.heap.built_then_frozen)."""
        if len(items) < FROZEN_AFTER_COMMANDS:
            self._unit_of_work.handle(items)
            return
        with built_then_frozen():
            self._unit_of_work.handle(items)

    def fire_due(self) -> bool:
        """Run an admission pass if the clock reached the next check; whether one was due."""
        if self._wake_at is None or self._wake_at > self._clock.now():
            return False
        retry_on_conflict(lambda: self._decide([CheckTime()]), self._reload, what=QUEUE_STREAM)
        return True

    def request(self, command: Requested) -> list[checking.CheckerEvent]:
        """Run now, backfill, cancel a backfill: decided with an admission pass and appended at once;
        the events (none for a request id seen before). Raises the domain's refusals."""
        self._decided = []
        retry_on_conflict(lambda: self._decide([command]), self._reload, what=QUEUE_STREAM)
        return self._decided

    def definition(self, schedule_id: str) -> Schedule | None:
        """The schedule as the checker last observed it (None: unknown or deleted)."""
        return checking.definition(self.state, schedule_id)

    def next_wake_at(self) -> datetime | None:
        return self._wake_at

    async def run_timers(self) -> None:
        await run_timer_loop(self._clock, self.fire_due, self.next_wake_at, self._timers_changed)

    def waiting(self) -> dict[str, Waiting]:
        """What each job pending its constraints waits on now (computed, not stored: it changes with every run)."""
        decision = checking.next_check(self.state, self._clock.now(), self._capacity)
        return {w.job_id: w for w in decision.waiting}

    def route(self, recorded: RecordedEvent) -> list[Outgoing]:
        if recorded.stream != QUEUE_STREAM:
            return []
        if recorded.type == JobsAdmitted.__name__:
            kept = self._arrived.launches_at(recorded.version)
            if kept is not None and None not in kept:
                return kept
            built = [Outgoing(LAUNCH_REQUESTS, message.job.id, message.SerializeToString())
                     for message in jobs_messages(recorded, TYPES, jobs_pb2.LaunchRequested)]
            return built if kept is None else [launch or made for launch, made in zip(kept, built)]
        if recorded.type == JobAdmitted.__name__:  # a log's admissions before JobsAdmitted
            message = job_message(recorded, TYPES, jobs_pb2.LaunchRequested)
            return [Outgoing(LAUNCH_REQUESTS, message.job.id, message.SerializeToString())]
        return []

    def _decide(self, commands: list[CheckerCommand], checkpoints: list[Checkpoint] = ()) -> bool:
        """One attempt: decide on the queue and append with the checkpoints; whether it appended.
        After a conflict (another writer's append) what the earlier passes settled no longer holds:
        `_settled` is None then, and the next attempt makes a full pass."""
        now = self._clock.now()
        settled: list[checking.Settled | None] = []

        def decide(_: str, state: CheckerState) -> list[checking.CheckerEvent]:
            events, done = checking.decide_admitting(state, commands, now, self._capacity, self._settled)
            settled.append(done)
            self._decided = events
            return events

        try:
            decided = attempt_batch(self._store, self._log, [QUEUE_STREAM], decide, checkpoints=checkpoints)
        except BaseException:
            self._settled = None
            raise
        if decided:
            self._arrived.appended(decided[QUEUE_STREAM], self._store.load(QUEUE_STREAM).version)
        if settled[-1] is not None:
            self._settled = settled[-1]
            self._wake(self._settled.until)
        return bool(decided)

    def _reload(self, conflict: WrongExpectedVersion) -> None:
        forget_conflicting(self._store, conflict)

    def _set_timer(self, state: CheckerState) -> None:
        now = self._clock.now()
        decision = checking.next_check(state, now, self._capacity)
        # A pass now would act (e.g. recovered after a crash between a check falling due and its append): due now.
        self._wake(now if decision.launch or decision.discard else decision.wake_at)

    def _wake(self, wake_at: datetime | None) -> None:
        if wake_at != self._wake_at:
            self._wake_at = wake_at
            self._timers_changed.set()
