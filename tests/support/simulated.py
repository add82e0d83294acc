"""The scheduler's real services on a simulated clock, pumped synchronously: deterministic and fast.

Registry, matcher and checker run on one SQLite log. Every committed event goes through each
service's outbox route; the resulting messages are handed to the handlers subscribed to their
topic at once, in order. Launch requests are collected with the simulated time they were made;
`finish()` plays the launcher's part by announcing a run's status. No sleeping: `advance()` moves
the clock from one due timer to the next."""
from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from sluice.bus.port import Record
from sluice.bus.topics import JOBS, LAUNCH_REQUESTS, PARTITION_NOTIFICATIONS, PROGRAM_NOTIFICATIONS, SCHEDULES
from sluice.clock import SimulatedClock
from sluice.domain.common import (
    Notification,
    PartitionCommitted,
    PartitionRef,
    ProgramStatusChanged,
    RunStatus,
)
from sluice.domain.apps import DeployApp, ProgramSpec
from sluice.domain.jobs import Job
from sluice.domain.schedules import Schedule, schedule_id_for
from sluice.domain.constraints import UNLIMITED, Capacity
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.ids import run_id_for
from sluice.readmodels.jobs import JobsView
from sluice.v1 import jobs_pb2
from sluice.wire.common import notification_to_proto
from sluice.wire.jobs import job_from_proto
from sluice_services.checker.service import CheckerService
from sluice_services.matcher.service import MatcherService
from sluice_services.registry.service import RegistryService


@dataclass(frozen=True)
class Launch:
    at: datetime
    job: Job

    @property
    def properties(self) -> dict[str, str]:
        return dict(self.job.context.properties)

    @property
    def partition_keys(self) -> list[dict[str, str]]:
        return [dict(p.key) for _, _, p in self.job.context.partitions()]


class SimulatedScheduler:
    def __init__(self, directory: Path, start: datetime, capacity: Capacity = UNLIMITED) -> None:
        self.clock = SimulatedClock(start)
        self.log = SqliteEventLog(directory / "events.db", clock=self.clock)
        self.registry = RegistryService(self.log, self.clock)
        self.matcher = MatcherService(self.log, self.clock)
        self.checker = CheckerService(self.log, self.clock, capacity)
        self.jobs = JobsView()
        self.launches: list[Launch] = []
        self._routes = [self.registry.route, self.matcher.route, self.checker.route]
        self._handlers = {
            SCHEDULES: [self.matcher.on_schedule_changed, self.checker.on_schedule_changed],
            PARTITION_NOTIFICATIONS: [self.matcher.on_notification],
            PROGRAM_NOTIFICATIONS: [self.matcher.on_notification, self.checker.on_program_status],
            JOBS: [self.checker.on_job_triggered],
            LAUNCH_REQUESTS: [self._record_launch],
        }
        self._position = 0
        self._offsets: dict[str, int] = defaultdict(int)

    # -- what users do ---------------------------------------------------------------------------

    async def create(self, schedule: Schedule) -> Schedule:
        created = self.registry.create(_with_id(schedule))
        await self.pump()
        return created

    async def deploy(self, namespace: str, app: str, programs: tuple[str, ...], schedules: tuple[Schedule, ...] = (),
                     update_schedules: bool = True) -> dict[str, list]:
        plan = self.registry.deploy(DeployApp(namespace, app, tuple(ProgramSpec(p) for p in programs),
                                              tuple(_with_id(s) for s in schedules), update_schedules))
        await self.pump()
        return plan

    async def update(self, schedule: Schedule) -> Schedule:
        updated = self.registry.update(_with_id(schedule))
        await self.pump()
        return updated

    async def delete(self, schedule: Schedule) -> None:
        self.registry.delete(_with_id(schedule).id)
        await self.pump()

    async def partitions(self, namespace: str, dataset: str, *keys: dict[str, str], size_bytes: int = 0) -> str:
        refs = tuple(PartitionRef(key, f"/data/{namespace}/{dataset}/{uuid.uuid4().hex[:8]}", size_bytes) for key in keys)
        return await self.publish(PartitionCommitted(namespace, dataset, refs))

    async def finish(self, launch: Launch, status: RunStatus = RunStatus.COMPLETED) -> str:
        """The launcher's part: the launched program's run ended with `status`."""
        return await self.publish(ProgramStatusChanged(launch.job.program, run_id_for(launch.job.id), status,
                                                       launch.job.schedule_id, launch.job.id))

    async def publish(self, payload: PartitionCommitted | ProgramStatusChanged) -> str:
        notification = Notification(str(uuid.uuid4()), self.clock.now(), payload)
        topic = PARTITION_NOTIFICATIONS if isinstance(payload, PartitionCommitted) else PROGRAM_NOTIFICATIONS
        await self._deliver(topic, notification.event_key(), notification_to_proto(notification).SerializeToString())
        await self.pump()
        return notification.id

    async def advance(self, delta: timedelta) -> None:
        """Move the clock by `delta`, firing every timer that falls due on the way, in time order."""
        target = self.clock.now() + delta
        while (due := self._next_wake_at()) is not None and due <= target:
            self.clock.set(max(due, self.clock.now()))
            await self._fire_due()
        self.clock.set(target)
        await self._fire_due()

    def _next_wake_at(self) -> datetime | None:
        return min((t for t in (self.matcher.next_wake_at(), self.checker.next_wake_at()) if t is not None),
                   default=None)

    async def _fire_due(self) -> None:
        self.matcher.fire_due()
        await self.pump()
        self.checker.fire_due()
        await self.pump()

    # -- plumbing --------------------------------------------------------------------------------

    async def pump(self) -> None:
        while events := self.log.read_all(self._position, 1000):
            for event in events:
                self._position = event.position
                self.jobs.apply(event)
                for route in self._routes:
                    for message in route(event):
                        await self._deliver(message.topic, message.key, message.value)

    async def _deliver(self, topic: str, key: str, value: bytes) -> None:
        offset = self._offsets[topic]
        self._offsets[topic] += 1
        record = Record(topic, 0, offset, key.encode(), value, (), 0)
        for handler in self._handlers[topic]:
            await handler(record)

    async def _record_launch(self, record: Record) -> None:
        self.launches.append(Launch(self.clock.now(), job_from_proto(jobs_pb2.LaunchRequested.FromString(record.value).job)))

    def close(self) -> None:
        self.log.close()


def _with_id(schedule: Schedule) -> Schedule:
    from dataclasses import replace

    return replace(schedule, id=schedule_id_for(schedule.program, schedule.name))
