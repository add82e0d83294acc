"""Apps and their deployment (seed 000, "Semantics of App Deployment"), pausing an app or a whole
namespace, and deleting an app: pure planning over the app and its schedules, applied by the registry
as one atomic append to all the streams it touches.

A pause is the state of a scope's stream: `app-NS.APP` for an app, `app-NS` for its namespace (names
hold no `.`, so the two never meet). A schedule is paused while its app or its namespace is: it fires
nothing, and one created there is paused from the start (sluice.domain.schedules.as_observed)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Mapping

from sluice.domain import schedules
from sluice.domain.names import validate_name
from sluice.domain.schedules import Schedule, ScheduleState
from sluice.domain.errors import FailedPrecondition, InvalidArgument, NotFound


def stream_name(namespace: str, app: str) -> str:
    return f"app-{namespace}.{app}"


def scope_stream(namespace: str, app: str = "") -> str:
    """The stream of an app, or with no app of the whole namespace (its pause)."""
    return stream_name(namespace, app) if app else f"app-{namespace}"


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


@dataclass(frozen=True)
class PauseApp:
    """Pause the app, or with no app every app of the namespace, now and later created: idempotent."""

    namespace: str
    app: str = ""


@dataclass(frozen=True)
class ResumeApp:
    """Undo PauseApp of the same scope (a schedule stays paused while its namespace or app still is)."""

    namespace: str
    app: str = ""


@dataclass(frozen=True)
class DeleteApp:
    """Delete the app and all its schedules. Refused while one of them is enabled and not paused."""

    namespace: str
    app: str


@dataclass(frozen=True)
class AppPaused:
    namespace: str
    app: str
    """Empty: the whole namespace."""
    at: datetime


@dataclass(frozen=True)
class AppResumed:
    namespace: str
    app: str
    at: datetime


@dataclass(frozen=True)
class AppDeleted:
    namespace: str
    app: str
    schedule_names: tuple[str, ...]
    at: datetime


EVENTS = (AppDeployed, AppPaused, AppResumed, AppDeleted)
AppEvent = AppDeployed | AppPaused | AppResumed | AppDeleted


@dataclass(frozen=True)
class AppState:
    """Of an app's stream, or of a namespace's (then only `paused` is used)."""

    programs: tuple[ProgramSpec, ...] = ()
    deployed: bool = False
    paused: bool = False

    def has_program(self, name: str) -> bool:
        return any(p.name == name for p in self.programs)


def evolve(state: AppState, event: AppEvent) -> AppState:
    match event:
        case AppDeployed(programs=programs):
            return replace(state, programs=programs, deployed=True)
        case AppPaused():
            return replace(state, paused=True)
        case AppResumed():
            return replace(state, paused=False)
        case AppDeleted():
            return AppState()
    raise TypeError(f"unknown event {event!r}")


def plan_pause(scopes: Mapping[str, AppState], existing: Mapping[str, ScheduleState], command: PauseApp | ResumeApp,
               now: datetime) -> dict[str, list]:
    """The scope's AppPaused or AppResumed and each schedule's SchedulePaused or ScheduleResumed; nothing
    when the scope is already so. `scopes`: the states of the namespace's stream and of the app streams of
    `existing`, the schedules in the scope by id."""
    _validate_scope(command.namespace, command.app, app_required=False)
    pausing = isinstance(command, PauseApp)
    target = scope_stream(command.namespace, command.app)
    before = scopes.get(target, AppState())
    if before.paused == pausing:
        return {}
    event = (AppPaused if pausing else AppResumed)(command.namespace, command.app, now)
    after = {**scopes, target: evolve(before, event)}
    plan: dict[str, list] = {target: [event]}
    namespace_paused = after.get(scope_stream(command.namespace), AppState()).paused
    for schedule_id, state in existing.items():
        if state.schedule is None:
            continue
        app_paused = after.get(stream_name(command.namespace, state.schedule.program.app), AppState()).paused
        to = schedules.PauseSchedule if namespace_paused or app_paused else schedules.ResumeSchedule
        _add(plan, schedule_id, schedules.decide(state, to(schedule_id), now))
    return plan


def plan_delete(app: AppState, existing: Mapping[str, ScheduleState], command: DeleteApp,
                now: datetime) -> dict[str, list]:
    """AppDeleted and each schedule's ScheduleDeleted. NotFound for an app with neither schedules nor a
    deployment; FailedPrecondition, naming them, while schedules of it would still fire (enabled, not
    paused): deleting a live app takes a pause (or disabling them) first, as a deployment's deletions take
    prune."""
    _validate_scope(command.namespace, command.app, app_required=True)
    found = {i: s.schedule for i, s in existing.items() if s.schedule is not None}
    if not found and not app.deployed and not app.paused:
        raise NotFound(f"app {command.namespace}.{command.app} does not exist")
    live = sorted(s.name for s in found.values() if schedules.as_observed(s).enabled)
    if live:
        raise FailedPrecondition(f"app {command.namespace}.{command.app} has {len(live)} enabled schedule(s) that "
                                 f"would still fire: {', '.join(live[:10])}{' ...' if len(live) > 10 else ''} "
                                 f"(pause the app or disable them first)")
    plan: dict[str, list] = {stream_name(command.namespace, command.app): [AppDeleted(
        command.namespace, command.app, tuple(sorted(s.name for s in found.values())), now)]}
    for schedule_id in found:
        _add(plan, schedule_id, schedules.decide(existing[schedule_id], schedules.DeleteSchedule(schedule_id), now))
    return plan


def _validate_scope(namespace: str, app: str, app_required: bool) -> None:
    validate_name("namespace", namespace)
    if app or app_required:
        validate_name("app", app)


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
