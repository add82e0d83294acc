"""Apps and their deployment (seed 000, "Semantics of App Deployment"): pure planning over the app
and its schedules, applied by the registry as one atomic append to all the streams it touches."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Mapping

from sluice.domain import schedules
from sluice.domain.names import validate_name
from sluice.domain.schedules import Schedule, ScheduleState
from sluice.domain.errors import InvalidArgument


def stream_name(namespace: str, app: str) -> str:
    return f"app-{namespace}.{app}"


@dataclass(frozen=True)
class ProgramSpec:
    name: str
    entry_point: str = ""
    description: str = ""


@dataclass(frozen=True)
class DeployApp:
    namespace: str
    app: str
    programs: tuple[ProgramSpec, ...]
    schedules: tuple[Schedule, ...]
    update_schedules: bool = True
    """True (the default, for development): the app's schedules become exactly the given ones.
    False (production, schedules managed by operators): schedules are left alone, except those of
    removed programs, which are deleted. An app's first deployment always creates its schedules."""


@dataclass(frozen=True)
class AppDeployed:
    namespace: str
    app: str
    programs: tuple[ProgramSpec, ...]
    schedule_names: tuple[str, ...]
    at: datetime


EVENTS = (AppDeployed,)


@dataclass(frozen=True)
class AppState:
    programs: tuple[ProgramSpec, ...] = ()
    deployed: bool = False

    def has_program(self, name: str) -> bool:
        return any(p.name == name for p in self.programs)


def evolve(state: AppState, event: AppDeployed) -> AppState:
    return AppState(event.programs, True)


def plan_deployment(app: AppState, existing: Mapping[str, ScheduleState], command: DeployApp,
                    now: datetime) -> dict[str, list]:
    """The events per stream: the app's own, and each schedule's create, update or delete.
    `existing` holds the states of the app's current schedules by schedule id."""
    validate(command)
    plan: dict[str, list] = {stream_name(command.namespace, command.app): [AppDeployed(
        command.namespace, command.app, command.programs, tuple(s.name for s in command.schedules), now)]}
    given = {s.id: s for s in command.schedules}
    if command.update_schedules or not app.deployed:
        for schedule_id, schedule in given.items():
            state = existing.get(schedule_id, ScheduleState())
            command_for = schedules.UpdateSchedule(schedule) if state.exists else schedules.CreateSchedule(schedule)
            _add(plan, schedule_id, schedules.decide(state, command_for, now))
        doomed = [schedule_id for schedule_id in existing if schedule_id not in given]
    else:
        kept = {p.name for p in command.programs}
        doomed = [schedule_id for schedule_id, state in existing.items()
                  if state.schedule is not None and state.schedule.program.program not in kept]
    for schedule_id in doomed:
        _add(plan, schedule_id, schedules.decide(existing[schedule_id], schedules.DeleteSchedule(schedule_id), now))
    return plan


def validate(command: DeployApp) -> None:
    for path, value in (("app.namespace", command.namespace), ("app.name", command.app)):
        validate_name(path, value)
    names = [p.name for p in command.programs]
    for index, name in enumerate(names):
        validate_name(f"app.programs[{index}].name", name)
        if names.index(name) != index:
            raise InvalidArgument(f"app.programs[{index}].name", f"program {name!r} is given twice")
    seen: set[str] = set()
    for index, schedule in enumerate(command.schedules):
        where = f"app.schedules[{index}]"
        if (schedule.program.namespace, schedule.program.app) != (command.namespace, command.app):
            raise InvalidArgument(f"{where}.program", f"must be a program of app {command.namespace}.{command.app}")
        if schedule.program.program not in names:
            raise InvalidArgument(f"{where}.program.program", f"{schedule.program.program!r} is not a program of the app")
        if schedule.name in seen:
            raise InvalidArgument(f"{where}.name", f"schedule {schedule.name!r} is given twice")
        seen.add(schedule.name)
        try:
            schedules.validate(schedule)
        except InvalidArgument as error:
            raise InvalidArgument(error.field.replace("schedule", where, 1), error.message) from error


def _add(plan: dict[str, list], schedule_id: str, events: list) -> None:
    if events:
        plan[schedules.stream_name(schedule_id)] = events
