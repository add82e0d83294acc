"""The schedule-registry: owns schedules; publishes every change on the schedules topic."""
from __future__ import annotations

from sluice.bus.topics import SCHEDULES
from sluice.clock import Clock
from sluice.domain import schedules
from sluice.domain.codec import EventTypes
from sluice.domain.schedules import (
    CreateSchedule,
    DeleteSchedule,
    DisableSchedule,
    EnableSchedule,
    Schedule,
    ScheduleState,
    UpdateSchedule,
)
from sluice.eventlog.port import EventLog, RecordedEvent
from sluice.runtime.aggregates import AggregateStore, catch_up, execute
from sluice.runtime.errors import NotFound
from sluice.runtime.outbox import Outgoing
from sluice.v1 import schedules_pb2
from sluice.wire.schedules import schedule_to_proto

STREAM_PREFIX = "schedule-"
TYPES = EventTypes(schedules.EVENTS)


class RegistryService:
    def __init__(self, log: EventLog, clock: Clock) -> None:
        self._log = log
        self._clock = clock
        self._store: AggregateStore[ScheduleState] = AggregateStore(log, TYPES, schedules.evolve, ScheduleState())

    def recover(self) -> None:
        catch_up(self._log, self._store, STREAM_PREFIX, TYPES)

    def create(self, schedule: Schedule) -> Schedule:
        return self._execute(schedule.id, CreateSchedule(schedule))

    def update(self, schedule: Schedule) -> Schedule:
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

    def list(self, namespace: str = "", app: str = "") -> list[Schedule]:
        found = [s.schedule for s in self._store.states().values() if s.schedule is not None]
        return sorted(
            (s for s in found if (not namespace or s.program.namespace == namespace) and (not app or s.program.app == app)),
            key=lambda s: (s.program.namespace, s.program.app, s.name),
        )

    def route(self, recorded: RecordedEvent) -> list[Outgoing]:
        if not recorded.stream.startswith(STREAM_PREFIX) or recorded.type not in TYPES:
            return []
        schedule_id = recorded.stream.removeprefix(STREAM_PREFIX)
        state = schedules.fold([TYPES.decode(r) for r in self._log.read_stream(recorded.stream)[: recorded.version + 1]])
        change = schedules_pb2.ScheduleChanged(schedule_id=schedule_id, deleted=state.schedule is None)
        if state.schedule is not None:
            change.schedule.CopyFrom(schedule_to_proto(state.schedule))
        return [Outgoing(SCHEDULES, schedule_id, change.SerializeToString())]

    def _execute(self, schedule_id: str, command: object) -> Schedule | None:
        now = self._clock.now()
        state, _ = execute(self._store, self._log, schedules.stream_name(schedule_id),
                           lambda s: schedules.decide(s, command, now))
        return state.schedule
