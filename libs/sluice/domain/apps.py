"""Apps and their deployment (seed 000, "Semantics of App Deployment"): pure planning over the app
and its schedules, applied by the registry as one atomic append to all the streams it touches."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Mapping

from sluice.domain import schedules
from sluice.domain.names import validate_name
from sluice.domain.schedules import Schedule, ScheduleState
from sluice.domain.errors import FailedPrecondition, InvalidArgument


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
    False (production, schedules managed by operators): existing schedules are left alone -- the
    app's and those made apart from it (CLI, API) -- except those of programs the previous deployment
    had and this one removes, which are deleted. The app's first deployment creates the given
    schedules that do not exist yet."""
    prune: bool = True
    """False: a deployment that would delete schedules is refused (FailedPrecondition naming them).
    The gRPC API's DeployAppRequest.prune defaults to false: deleting needs the caller's consent."""


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
    if command.update_schedules:
        for schedule_id, schedule in given.items():
            state = existing.get(schedule_id, ScheduleState())
            command_for = schedules.UpdateSchedule(schedule) if state.exists else schedules.CreateSchedule(schedule)
            _add(plan, schedule_id, schedules.decide(state, command_for, now))
        doomed = [schedule_id for schedule_id in existing if schedule_id not in given]
    else:
        if not app.deployed:
            for schedule_id, schedule in given.items():
                state = existing.get(schedule_id, ScheduleState())
                if not state.exists:
                    _add(plan, schedule_id, schedules.decide(state, schedules.CreateSchedule(schedule), now))
        removed = {p.name for p in app.programs} - {p.name for p in command.programs}
        doomed = [schedule_id for schedule_id, state in existing.items()
                  if state.schedule is not None and state.schedule.program.program in removed]
    if doomed and not command.prune:
        names = sorted(existing[i].schedule.name for i in doomed if existing[i].schedule is not None)
        raise FailedPrecondition(f"deploying {command.namespace}.{command.app} would delete {len(doomed)} "
                                 f"schedule(s) it does not name: {', '.join(names)} (prune to delete them)")
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
