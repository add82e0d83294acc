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
    CheckerState,
    CheckTime,
    EnqueueJob,
    JobAdmitted,
    ObserveRun,
    ObserveSchedule,
)
from sluice.eventlog.codec import EventTypes
from sluice.domain.common import ProgramStatusChanged
from sluice.domain.constraints import UNLIMITED, Capacity, Waiting
from sluice.eventlog.port import Checkpoint, CheckpointMoved, EventLog, RecordedEvent
from sluice.runtime.aggregates import MAX_CONFLICT_RETRIES, AggregateStore, execute
from sluice.runtime.consumer import BatchHandler
from sluice.domain.errors import InvalidArgument
from sluice.runtime.errors import MalformedMessage
from sluice.runtime.offsets import ConsumedOffsets
from sluice.runtime.outbox import Outgoing
from sluice.runtime.timers import run_timer_loop
from sluice.v1 import jobs_pb2, schedules_pb2
from sluice.wire.common import notification_from_bytes, parse_bus_message
from sluice.wire.jobs import job_from_proto, job_to_proto
from sluice.wire.schedules import schedule_from_proto

TYPES = EventTypes(checking.EVENTS)
SNAPSHOTS = ("checker",)
SNAPSHOT_VERSION = 1
"""The schema version of this service's snapshots (the queue stream's Loaded[CheckerState]): bump it when
CheckerState (or anything it holds) changes shape; a snapshot of another version is ignored and the
log folded instead."""


def snapshot_size(state: CheckerState) -> int:
    """The entries a snapshot of the queue stream packs: a snapshot waits for as many events."""
    return len(state.schedules) + len(state.queue)


class CheckerService:
    def __init__(self, log: EventLog, clock: Clock, capacity: Capacity = UNLIMITED) -> None:
        self._log = log
        self._clock = clock
        self._capacity = capacity
        self._store: AggregateStore[CheckerState] = AggregateStore(log, TYPES, checking.evolve, CheckerState(),
                                                                     snapshot=SNAPSHOTS[0], size=snapshot_size,
                                                                     snapshot_version=SNAPSHOT_VERSION)
        self._offsets = ConsumedOffsets(log, "checker")
        self._wake_at: datetime | None = None
        self._settled: checking.Settled | None = None
        """What the passes since the last full one settled (decide_admitting); None: the next is full."""
        self._timers_changed = asyncio.Event()

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

    async def on_job_triggered(self, record: Record) -> None:
        await self.apply([(record, self.parse_job_triggered(record))])

    async def on_program_status(self, record: Record) -> None:
        await self.apply([(record, self.parse_program_status(record))])

    async def on_schedule_changed(self, record: Record) -> None:
        await self.apply([(record, self.parse_schedule_change(record))])

    @staticmethod
    def parse_job_triggered(record: Record) -> EnqueueJob:
        message = parse_bus_message(jobs_pb2.JobTriggered, record.value)
        if not message.job.id or not message.job.schedule_id:
            raise MalformedMessage("job.id and job.schedule_id are required")
        try:
            return EnqueueJob(job_from_proto(message.job))
        except InvalidArgument as error:
            raise MalformedMessage(str(error)) from error

    @staticmethod
    def parse_program_status(record: Record) -> ObserveRun:
        try:
            notification = notification_from_bytes(record.value)
        except InvalidArgument as error:
            raise MalformedMessage(str(error)) from error
        status = notification.payload
        if not isinstance(status, ProgramStatusChanged):
            raise MalformedMessage(f"expected a program status notification, got {type(status).__name__}")
        return ObserveRun(status.program, status.run_id, status.status, notification.time)

    @staticmethod
    def parse_schedule_change(record: Record) -> ObserveSchedule:
        change = parse_bus_message(schedules_pb2.ScheduleChanged, record.value)
        if not change.schedule_id:
            raise MalformedMessage("schedule_id: must not be empty")
        try:
            schedule = None if change.deleted else schedule_from_proto(change.schedule, change.schedule_id)
        except InvalidArgument as error:
            raise MalformedMessage(str(error)) from error
        return ObserveSchedule(change.schedule_id, schedule)

    async def apply(self, items: list[tuple[Record, object]]) -> None:
        """Decide on the commands of records not consumed before; the events and the consumed
        positions are appended together. Positions another writer recorded meanwhile (CheckpointMoved)
        are read again, and what it recorded is skipped."""
        for _ in range(MAX_CONFLICT_RETRIES):
            commands, checkpoints = [], {}
            for record, command in items:
                checkpoint = self._offsets.checkpoint(record)
                if checkpoint is not None:  # else consumed before: its events are in the log
                    commands.append(command)
                    checkpoints[checkpoint.name] = checkpoint
            if not commands:
                return
            try:
                self._decide(commands, list(checkpoints.values()))
                return
            except CheckpointMoved:
                self._offsets.refresh(set(checkpoints))
        raise RuntimeError(f"gave up after {MAX_CONFLICT_RETRIES} moved consumed positions")

    def fire_due(self) -> bool:
        """Run an admission pass if the clock reached the next check; whether one was due."""
        if self._wake_at is None or self._wake_at > self._clock.now():
            return False
        self._decide([CheckTime()])
        return True

    def next_wake_at(self) -> datetime | None:
        return self._wake_at

    async def run_timers(self) -> None:
        await run_timer_loop(self._clock, self.fire_due, self.next_wake_at, self._timers_changed)

    def waiting(self) -> dict[str, Waiting]:
        """What each job pending its constraints waits on now (computed, not stored: it changes with every run)."""
        decision = checking.next_check(self.state, self._clock.now(), self._capacity)
        return {w.job_id: w for w in decision.waiting}

    def route(self, recorded: RecordedEvent) -> list[Outgoing]:
        if recorded.stream != QUEUE_STREAM or recorded.type != JobAdmitted.__name__:
            return []
        event: JobAdmitted = TYPES.decode(recorded)
        message = jobs_pb2.LaunchRequested(job=job_to_proto(event.job))
        return [Outgoing(LAUNCH_REQUESTS, event.job.id, message.SerializeToString())]

    def _decide(self, commands: list[object], checkpoints: list[Checkpoint] = ()) -> None:
        now = self._clock.now()
        attempts: list[checking.Settled | None] = []

        def decide(state: CheckerState) -> list[checking.CheckerEvent]:
            # a retry follows another writer's append: what the earlier passes settled no longer holds
            events, settled = checking.decide_admitting(state, commands, now, self._capacity,
                                                        None if attempts else self._settled)
            attempts.append(settled)
            return events

        try:
            _, events = execute(self._store, self._log, QUEUE_STREAM, decide, checkpoints=checkpoints)
        except BaseException:
            self._settled = None
            raise
        if events:
            for checkpoint in checkpoints:
                self._offsets.recorded(checkpoint)
        if attempts[-1] is not None:
            self._settled = attempts[-1]
            self._wake(self._settled.until)

    def _set_timer(self, state: CheckerState) -> None:
        now = self._clock.now()
        decision = checking.next_check(state, now, self._capacity)
        # A pass now would act (e.g. recovered after a crash between a check falling due and its append): due now.
        self._wake(now if decision.launch or decision.discard else decision.wake_at)

    def _wake(self, wake_at: datetime | None) -> None:
        if wake_at != self._wake_at:
            self._wake_at = wake_at
            self._timers_changed.set()
