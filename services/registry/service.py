"""The schedule-registry: owns schedules; publishes every change on the schedules topic."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from sluice.bus.topics import SCHEDULES
from sluice.clock import Clock
from sluice.domain import apps, bounds, schedules
from sluice.domain.apps import AppState, DeleteApp, DeployApp, PauseApp, ResumeApp, ProgramSpec
from sluice.eventlog.codec import EventTypes
from sluice.domain.triggers import validate_trigger
from sluice.domain.schedules import (
    CreateSchedule,
    DeleteSchedule,
    DisableSchedule,
    EnableSchedule,
    Schedule,
    ScheduleCommand,
    ScheduleState,
    UpdateSchedule,
)
from sluice.eventlog.port import EventLog, RecordedEvent
from sluice.runtime.aggregates import AggregateStore, catch_up, execute
from sluice.domain.errors import NotFound
from sluice.runtime.outbox import Outgoing
from sluice.runtime.unit_of_work import retry_on_conflict
from sluice.v1 import schedules_pb2
from sluice.wire.schedules import schedule_to_proto
from sluice_services.catalogue import REGISTRY

STREAM_PREFIX, = REGISTRY.stream_prefixes
TYPES = EventTypes(schedules.EVENTS)
APP_PREFIX = "app-"
APP_TYPES = EventTypes(apps.EVENTS)
SNAPSHOTS = REGISTRY.snapshots
SNAPSHOT_VERSION = 2
"""The schema version of this service's snapshots (Loaded[ScheduleState], Loaded[AppState] per stream): bump it when
ScheduleState or AppState (or anything they hold) changes shape; a snapshot of another version is ignored and the
log folded instead."""


@dataclass(frozen=True)
class AppView:
    """An app as GetApp and ListApps show it: deployed, or existing by its schedules alone."""

    namespace: str
    app: str
    programs: tuple[ProgramSpec, ...]
    deployed: bool
    paused: bool
    namespace_paused: bool
    schedules: int
    enabled_schedules: int


class RegistryService:
    def __init__(self, log: EventLog, clock: Clock) -> None:
        self._log = log
        self._clock = clock
        self._store: AggregateStore[ScheduleState] = AggregateStore(log, TYPES, schedules.evolve, ScheduleState(),
                                                                      clock=clock, snapshot=SNAPSHOTS[0],
                                                                      snapshot_version=SNAPSHOT_VERSION)
        self._apps: AggregateStore[AppState] = AggregateStore(log, APP_TYPES, apps.evolve, AppState(), clock=clock,
                                                              snapshot=SNAPSHOTS[1],
                                                              snapshot_version=SNAPSHOT_VERSION)
        self._sorted: list[Schedule] | None = None
        """Every schedule in listing order, until a change: ListSchedules pages it without sorting again."""

    def recover(self) -> None:
        catch_up(self._log, self._store, STREAM_PREFIX, TYPES)
        catch_up(self._log, self._apps, APP_PREFIX, APP_TYPES)
        self._sorted = None

    def create(self, schedule: Schedule) -> Schedule:
        self._check_trigger(schedule)
        self._check_size(schedule)
        paused = self.is_paused(schedule.program.namespace, schedule.program.app)
        return self._execute(schedule.id, CreateSchedule(replace(schedule, paused=paused)))

    def deploy(self, command: DeployApp) -> dict[str, list]:
        """Deploy an app with its programs and schedules; every stream it touches in one append."""
        for index, schedule in enumerate(command.schedules):
            self._check_trigger(schedule, f"app.schedules[{index}].trigger")
            self._check_size(schedule, f"app.schedules[{index}]")
        app_stream = apps.stream_name(command.namespace, command.app)

        def plan(now) -> dict[str, list]:
            paused = self.is_paused(command.namespace, command.app)
            deployed = replace(command, schedules=tuple(replace(s, paused=paused) for s in command.schedules))
            return apps.plan_deployment(self._apps.load(app_stream).state, self._states_of(command.namespace,
                                                                                           command.app), deployed, now)

        return self._apply(plan, f"deploying {app_stream}")

    def pause(self, command: PauseApp | ResumeApp) -> dict[str, list]:
        """Pause or resume an app or a namespace and every schedule in it, in one append; {} when it was so."""
        def plan(now) -> dict[str, list]:
            existing = self._states_of(command.namespace, command.app)
            streams = {apps.scope_stream(command.namespace), apps.scope_stream(command.namespace, command.app),
                       *(apps.stream_name(command.namespace, s.schedule.program.app) for s in existing.values())}
            scopes = {stream: self._apps.load(stream).state for stream in streams}
            return apps.plan_pause(scopes, existing, command, now)

        return self._apply(plan, f"pausing {command.namespace}.{command.app or '*'}")

    def delete_app(self, command: DeleteApp) -> dict[str, list]:
        """Delete an app and its schedules in one append."""
        app_stream = apps.stream_name(command.namespace, command.app)
        return self._apply(lambda now: apps.plan_delete(self._apps.load(app_stream).state, self._states_of(
            command.namespace, command.app), command, now), f"deleting {app_stream}")

    def is_paused(self, namespace: str, app: str) -> bool:
        return (self._apps.load(apps.scope_stream(namespace)).state.paused
                or self._apps.load(apps.stream_name(namespace, app)).state.paused)

    def app_view(self, namespace: str, app: str) -> AppView:
        found = self.app_views(namespace, app)
        if not found:
            raise NotFound(f"app {namespace}.{app} does not exist")
        return found[0]

    def app_views(self, namespace: str = "", app: str = "") -> list[AppView]:
        """The apps with a deployment, a pause or schedules, ordered by namespace and app."""
        counts: dict[tuple[str, str], list[int]] = {}
        for schedule in self.list(namespace, app):
            count = counts.setdefault((schedule.program.namespace, schedule.program.app), [0, 0])
            count[0] += 1
            count[1] += schedule.enabled
        states: dict[tuple[str, str], AppState] = {}
        for stream, state in self._apps.states().items():
            scope_namespace, dot, scope_app = stream.removeprefix(APP_PREFIX).partition(".")
            if dot and (state.deployed or state.paused) and (not namespace or scope_namespace == namespace) and (
                    not app or scope_app == app):
                states[scope_namespace, scope_app] = state
        views = []
        for key in sorted(counts.keys() | states.keys()):
            state, (total, enabled) = states.get(key, AppState()), counts.get(key, (0, 0))
            views.append(AppView(key[0], key[1], state.programs, state.deployed, state.paused,
                                 self._apps.load(apps.scope_stream(key[0])).state.paused, total, enabled))
        return views

    def _states_of(self, namespace: str, app: str) -> dict[str, ScheduleState]:
        return {s.id: self._store.load(schedules.stream_name(s.id)).state for s in self.list(namespace, app)}

    def _apply(self, plan_at: Callable[..., dict[str, list]], what: str) -> dict[str, list]:
        """The plan's events, each stream's to its store, in one append; planned again on a conflict."""
        now = self._clock.now()
        stores: dict[str, AggregateStore] = {}

        def attempt() -> dict[str, list]:
            plan = plan_at(now)
            stores.update({stream: self._apps if stream.startswith(APP_PREFIX) else self._store for stream in plan})
            if not plan:
                return plan
            appends = [stores[stream].prepare(stream, events) for stream, events in plan.items()]
            versions = self._log.append_batch(appends)
            for (stream, events), version in zip(plan.items(), versions):
                stores[stream].commit(stream, events, version)
            return plan

        try:
            return retry_on_conflict(attempt, lambda conflict: stores[conflict.stream].forget(conflict.stream), what=what)
        finally:
            self._sorted = None

    def _check_trigger(self, schedule: Schedule, path: str = "schedule.trigger") -> None:
        """The trigger's own rules. A program-status trigger may name any program, deployed or not yet:
        programs are not registered anywhere (README, "Programs"); one never run never fires it."""
        validate_trigger(schedule.trigger, path)

    @staticmethod
    def _check_size(schedule: Schedule, path: str = "schedule") -> None:
        """Each part has its limit, but together they could make a schedule change too big for the bus: the
        outbox would dead-letter it and the matcher never see the schedule (bounds.MAX_SCHEDULE_BYTES)."""
        bounds.check_size(path, schedule_to_proto(schedule).ByteSize(), bounds.MAX_SCHEDULE_BYTES)

    def update(self, schedule: Schedule) -> Schedule:
        self._check_trigger(schedule)
        self._check_size(schedule)
        return self._execute(schedule.id, UpdateSchedule(schedule))

    def delete(self, schedule_id: str) -> None:
        self._execute(schedule_id, DeleteSchedule(schedule_id))

    def enable(self, schedule_id: str) -> Schedule:
        return self._execute(schedule_id, EnableSchedule(schedule_id))

    def disable(self, schedule_id: str) -> Schedule:
        return self._execute(schedule_id, DisableSchedule(schedule_id))

    def get(self, schedule_id: str) -> Schedule:
        schedule = self._store.load(schedules.stream_name(schedule_id)).state.schedule
        if schedule is None:
            raise NotFound(f"schedule {schedule_id} does not exist")
        return schedule

    def name_of(self, schedule_id: str) -> str:
        """The name a schedule had, also after its deletion (from its stream's history)."""
        for recorded in reversed(self._log.read_stream(schedules.stream_name(schedule_id))):
            event = TYPES.decode(recorded)
            if isinstance(event, (schedules.ScheduleCreated, schedules.ScheduleUpdated)):
                return event.schedule.name
        return schedule_id

    def list(self, namespace: str = "", app: str = "") -> list[Schedule]:
        """By (namespace, app, name); the caller must not change the list."""
        if self._sorted is None:
            found = [s.schedule for s in self._store.states().values() if s.schedule is not None]
            self._sorted = sorted(found, key=lambda s: (s.program.namespace, s.program.app, s.name))
        if not namespace and not app:
            return self._sorted
        return [s for s in self._sorted
                if (not namespace or s.program.namespace == namespace) and (not app or s.program.app == app)]

    def route(self, recorded: RecordedEvent) -> list[Outgoing]:
        if not recorded.stream.startswith(STREAM_PREFIX) or recorded.type not in TYPES:
            return []
        schedule_id = recorded.stream.removeprefix(STREAM_PREFIX)
        state = self._state_at(recorded.stream, recorded.version)
        change = schedules_pb2.ScheduleChanged(schedule_id=schedule_id, deleted=state.schedule is None)
        if state.schedule is not None:
            change.schedule.CopyFrom(schedule_to_proto(state.schedule))
        return [Outgoing(SCHEDULES, schedule_id, change.SerializeToString())]

    def _state_at(self, stream: str, version: int) -> ScheduleState:
        """The schedule as of `version`: the cached state when the relay publishes what was just
        appended (the usual case), else a fold of the stream's first events (a relay catching up)."""
        loaded = self._store.load(stream)
        if loaded.version == version:
            return loaded.state
        return schedules.fold([TYPES.decode(r) for r in self._log.read_stream(stream)[: version + 1]])

    def _execute(self, schedule_id: str, command: ScheduleCommand) -> Schedule | None:
        now = self._clock.now()
        try:
            state, _ = execute(self._store, self._log, schedules.stream_name(schedule_id),
                               lambda s: schedules.decide(s, command, now))
        finally:
            self._sorted = None
        return state.schedule
