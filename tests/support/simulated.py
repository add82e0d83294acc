"""The scheduler's production wiring on a simulated clock, pumped synchronously: deterministic and fast.

The ServiceSpecs services/composition.py builds (registry; matcher with its lookup, one member; checker;
launcher, its programs faked behind the ProgramSubmitter port: tests/support/programs.py) run on one
SQLite log and an in-memory in-process bus, driven by tests/support/pump.py: every outbox relay and
every consumer group member is stepped until the bus is quiet, then the clock moves to the next due
timer. Launch requests are collected from the bus with the simulated time they were made;
`finish()` ends a launched run's program, and the launcher reports its status as in production.
No sleeping: `advance()` moves the clock from one due timer to the next."""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path

from sluice.bus.inprocess import InProcessBus
from sluice.bus.port import Record
from sluice.bus.topics import LAUNCH_REQUESTS, PARTITION_NOTIFICATIONS, PROGRAM_NOTIFICATIONS
from sluice.clock import SimulatedClock
from sluice.domain.apps import DeployApp, ProgramSpec
from sluice.domain.common import Notification, PartitionCommitted, PartitionRef, ProgramStatusChanged, RunStatus
from sluice.domain.constraints import UNLIMITED, Capacity
from sluice.domain.jobs import Job
from sluice.domain.schedules import Schedule, schedule_id_for
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.ids import run_id_for
from sluice.readmodels.jobs import JobsView
from sluice.runtime.consumer import Subscription
from sluice.runtime.outbox import EVENT_ID_HEADER
from sluice.runtime.service import ServiceSpec
from sluice.v1 import jobs_pb2
from sluice.wire.common import notification_to_proto
from sluice.wire.jobs import job_from_proto
from sluice_services import composition
from sluice_services.checker.service import CheckerService
from sluice_services.launcher.service import LauncherService
from sluice_services.matcher.service import MatcherService
from sluice_services.registry.service import RegistryService
from tests.support.programs import FakePrograms
from tests.support.pump import BusPump
from tests.support.run_data import LocalRunData

LAUNCH_SLOTS = 10_000
"""The launcher's own limit, high: the checker's constraints decide concurrency in the scenarios."""


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
    def __init__(self, directory: Path, start: datetime, capacity: Capacity = UNLIMITED, *,
                 launcher: bool = True) -> None:
        """`launcher=False`: no launcher; `finish()` then announces the run's status itself."""
        self.clock = SimulatedClock(start)
        self.log = SqliteEventLog(directory / "events.db", clock=self.clock)
        self.bus = InProcessBus(clock=self.clock)
        self.programs = FakePrograms()
        self._outside = self.bus.producer()  # the world's producers of notifications
        settings = composition.Settings(data_dir=directory / "sluice", capacity=capacity,
                                        max_parallel_runs=LAUNCH_SLOTS)
        settings.data_dir.mkdir(parents=True, exist_ok=True)  # as run_embedded makes it
        producer = self.bus.producer()
        sent_jobs = composition.sent_jobs_for(("matcher", "checker"))  # as `build` wires the in-process bus
        specs = [composition.registry_spec(self.log, self.clock, producer),
                 composition.matcher_spec(self.log, self.clock, producer, one_member=True, sent_jobs=sent_jobs),
                 composition.checker_spec(self.log, self.clock, capacity, sent_jobs=sent_jobs)]
        if launcher:
            datasets = composition.datasets_spec(self.log, self.clock, settings)
            specs.append(composition.launcher_spec(self.log, self.clock, settings, catalog=self.programs,
                                                   submitter=self.programs,
                                                   run_data=LocalRunData(_service(datasets), settings.partitions_dir)))
            specs.append(datasets)
        self.registry: RegistryService = _service(specs[0])
        self.matcher: MatcherService = _service(specs[1])
        self.checker: CheckerService = _service(specs[2])
        self.launcher: LauncherService | None = _service(specs[3]) if launcher else None
        self.jobs = JobsView()
        self.launches: list[Launch] = []
        self._pump = BusPump(self.bus, self.log, self.clock, specs,
                             [Subscription("scenario-launches", {LAUNCH_REQUESTS: self._record_launch})])
        self._started = False
        self._position = 0
        self._admitted_at: dict[tuple[str, str], tuple[int, int]] = {}
        self._seen: list[tuple[str, Launch]] = []

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

    async def finish(self, launch: Launch, status: RunStatus = RunStatus.COMPLETED) -> None:
        """The launched program's run ends with `status` (COMPLETED, FAILED or LOST): its program
        exits so; the launcher reports it. Without a launcher, its status is announced directly."""
        run_id = run_id_for(launch.job.id)
        if self.launcher is None:
            await self.publish(ProgramStatusChanged(launch.job.program, run_id, status, launch.job.schedule_id,
                                                    launch.job.id))
            return
        await self.pump()
        self.programs.end(run_id, status)
        await self.pump()

    async def publish(self, payload: PartitionCommitted | ProgramStatusChanged) -> str:
        await self._start()
        notification = Notification(str(uuid.uuid4()), self.clock.now(), payload)
        topic = PARTITION_NOTIFICATIONS if isinstance(payload, PartitionCommitted) else PROGRAM_NOTIFICATIONS
        await self._outside.send(topic, notification_to_proto(notification).SerializeToString(),
                                 key=notification.event_key().encode())
        await self.pump()
        return notification.id

    async def advance(self, delta: timedelta) -> None:
        """Move the clock by `delta`, firing every timer that falls due on the way, in time order."""
        await self._start()
        await self._pump.advance_to(self.clock.now() + delta)
        self._follow_jobs()

    # -- plumbing --------------------------------------------------------------------------------

    async def pump(self) -> None:
        """Until the bus is quiet: every outbox relayed, every consumer caught up."""
        await self._start()
        await self._pump.settle()
        self._follow_jobs()

    async def _start(self) -> None:
        if not self._started:
            self._started = True
            await self._pump.start()

    def _follow_jobs(self) -> None:
        """The jobs view up to the log's head; launches seen on the bus since, in the order of their
        admissions in the log (the launch requests topic has partitions: its poll order is not that)."""
        while events := self.log.read_all(self._position, 1000):
            for event in events:
                self.jobs.apply(event)
                if event.type == "JobsAdmitted":
                    for index, job in enumerate(json.loads(event.data)["jobs"]):
                        self._admitted_at[event.id, job["id"]] = event.position, index
            self._position = events[-1].position
        seen, self._seen = self._seen, []
        self.launches += [launch for _, launch in sorted(
            seen, key=lambda pair: self._admitted_at[pair[0], pair[1].job.id])]

    async def _record_launch(self, record: Record) -> None:
        event_id = dict(record.headers)[EVENT_ID_HEADER].decode()
        job = job_from_proto(jobs_pb2.LaunchRequested.FromString(record.value).job)
        self._seen.append((event_id, Launch(self.clock.now(), job)))

    def close(self) -> None:
        for program in self.programs.running.values():
            program.end(None)
        self.log.close()


def _service(spec: ServiceSpec):
    """The service object behind a spec: the owner of its route, or of its timers."""
    for part in (spec.route, *spec.background):
        owner = getattr(part, "__self__", None)
        if owner is not None and not isinstance(owner, JobsView):
            return owner
    raise LookupError(f"no service object behind the {spec.name} spec")


def _with_id(schedule: Schedule) -> Schedule:
    return replace(schedule, id=schedule_id_for(schedule.program, schedule.name))
