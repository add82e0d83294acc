"""Pausing an app or a namespace, and deleting an app (sluice.domain.apps): which events each stream gets,
idempotence, a schedule paused while its app or namespace is, and what the matcher and checker see."""
from __future__ import annotations

from dataclasses import replace

import pytest

from sluice.domain import apps, schedules
from sluice.domain.apps import AppPaused, AppResumed, AppState, DeleteApp, PauseApp, ResumeApp
from sluice.domain.errors import FailedPrecondition, InvalidArgument, NotFound
from sluice.domain.matching import MatchNotification
from sluice.domain.schedules import ScheduleState, as_observed
from sluice.v1 import schedules_pb2
from sluice.bus.port import Record
from sluice.wire.schedules import parse_schedule_change, schedule_to_proto
from tests.unit.test_matching import T0, notification, observed, run, schedule

NS_STREAM, APP_STREAM = apps.scope_stream("experiments"), apps.stream_name("experiments", "clickstream")


def existing(*found: schedules.Schedule) -> dict[str, ScheduleState]:
    return {s.id: ScheduleState(s, s.generation) for s in found}


def applied(states: dict[str, ScheduleState], scopes: dict[str, AppState], plan: dict[str, list]):
    states, scopes = dict(states), dict(scopes)
    for stream, events in plan.items():
        for event in events:
            if stream.startswith("app-"):
                scopes[stream] = apps.evolve(scopes.get(stream, AppState()), event)
            else:
                schedule_id = stream.removeprefix("schedule-")
                states[schedule_id] = schedules.evolve(states[schedule_id], event)
    return states, scopes


def test_pausing_an_app_pauses_each_schedule_and_keeps_its_own_enabled():
    on, off = schedule(), replace(schedule(enabled=False), id="sched-2", name="other")
    plan = apps.plan_pause({}, existing(on, off), PauseApp("experiments", "clickstream"), T0)
    assert plan[APP_STREAM] == [AppPaused("experiments", "clickstream", T0)]
    assert plan["schedule-sched-1"] == [schedules.SchedulePaused("sched-1", T0)]
    states, scopes = applied(existing(on, off), {}, plan)
    assert states["sched-1"].schedule.paused and states["sched-1"].schedule.enabled
    assert not as_observed(states["sched-1"].schedule).enabled and not states["sched-2"].schedule.enabled
    resumed = apps.plan_pause(scopes, states, ResumeApp("experiments", "clickstream"), T0)
    states, scopes = applied(states, scopes, resumed)
    assert states["sched-1"].schedule == on and states["sched-2"].schedule == off and not scopes[APP_STREAM].paused


def test_pause_and_resume_are_idempotent():
    states, scopes = applied(existing(schedule()), {}, apps.plan_pause({}, existing(schedule()),
                                                                          PauseApp("experiments", "clickstream"), T0))
    assert apps.plan_pause(scopes, states, PauseApp("experiments", "clickstream"), T0) == {}
    assert apps.plan_pause({}, existing(schedule()), ResumeApp("experiments", "clickstream"), T0) == {}


def test_a_schedule_stays_paused_while_its_namespace_is_though_its_app_resumes():
    both = {NS_STREAM: AppState(paused=True), APP_STREAM: AppState(paused=True)}
    paused = existing(replace(schedule(), paused=True))
    plan = apps.plan_pause(both, paused, ResumeApp("experiments", "clickstream"), T0)
    assert plan == {APP_STREAM: [AppResumed("experiments", "clickstream", T0)]}
    plan = apps.plan_pause({**both, APP_STREAM: AppState()}, paused, ResumeApp("experiments"), T0)
    assert plan == {NS_STREAM: [AppResumed("experiments", "", T0)],
                    "schedule-sched-1": [schedules.ScheduleResumed("sched-1", T0)]}


def test_an_update_keeps_the_pause_whatever_the_request_says():
    paused = ScheduleState(replace(schedule(), paused=True), 1)
    [updated] = schedules.decide(paused, schedules.UpdateSchedule(replace(schedule(), priority=4)), T0)
    assert updated.schedule.paused and updated.schedule.priority == 4


def test_deleting_a_live_app_is_refused_naming_its_schedules():
    with pytest.raises(FailedPrecondition, match="1 enabled schedule.*hourly.*pause the app"):
        apps.plan_delete(AppState(), existing(schedule()), DeleteApp("experiments", "clickstream"), T0)


def test_deleting_a_paused_app_deletes_it_and_all_its_schedules():
    paused = replace(schedule(), paused=True)
    plan = apps.plan_delete(AppState(deployed=True, paused=True), existing(paused),
                            DeleteApp("experiments", "clickstream"), T0)
    assert plan[APP_STREAM] == [apps.AppDeleted("experiments", "clickstream", ("hourly",), T0)]
    assert plan["schedule-sched-1"] == [schedules.ScheduleDeleted("sched-1", T0)]
    assert apps.evolve(AppState(deployed=True, paused=True), plan[APP_STREAM][0]) == AppState()


def test_deleting_an_app_that_does_not_exist_is_not_found():
    with pytest.raises(NotFound):
        apps.plan_delete(AppState(), {}, DeleteApp("experiments", "nothing"), T0)


@pytest.mark.parametrize("command, field", [(PauseApp("bad.ns"), "namespace"), (PauseApp("ns", "../x"), "app"),
                                            (PauseApp(""), "namespace")])
def test_a_scope_that_is_not_a_name_names_the_field(command, field):
    with pytest.raises(InvalidArgument) as raised:
        apps.plan_pause({}, {}, command, T0)
    assert raised.value.field == field


def test_the_matcher_sees_a_paused_schedule_as_disabled_and_fires_nothing():
    paused = replace(schedule(), paused=True)
    change = schedules_pb2.ScheduleChanged(schedule_id=paused.id, schedule=schedule_to_proto(paused))
    observed_schedule = parse_schedule_change(Record("sluice.schedules", 0, 0, None, change.SerializeToString(), (), 0)).schedule
    assert not observed_schedule.enabled and observed_schedule.paused
    _, events = run(observed(observed_schedule), MatchNotification(notification(1)))
    assert not any(type(e).__name__ == "JobTriggered" for e in events)
