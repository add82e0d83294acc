from datetime import datetime, timezone

import pytest

from sluice.domain.common import ProgramRef
from sluice.domain.schedules import (
    CreateSchedule,
    DeleteSchedule,
    DisableSchedule,
    EnableSchedule,
    Schedule,
    ScheduleCreated,
    ScheduleDeleted,
    ScheduleDisabled,
    ScheduleEnabled,
    ScheduleState,
    decide,
    fold,
    schedule_id_for,
)
from sluice.domain.triggers import PartitionTrigger
from sluice.domain.errors import AlreadyExists, InvalidArgument, NotFound

NOW = datetime(2026, 11, 22, 10, tzinfo=timezone.utc)
PROGRAM = ProgramRef("experiments", "clickstream", "hourly_metrics")


def schedule(**changes) -> Schedule:
    fields = dict(id=schedule_id_for(PROGRAM, "s"), name="s", program=PROGRAM,
                  trigger=PartitionTrigger("experiments", "clickstream", 1))
    fields.update(changes)
    return Schedule(**fields)


def test_create_records_first_generation():
    events = decide(ScheduleState(), CreateSchedule(schedule()), NOW)
    assert events == [ScheduleCreated(schedule(generation=1), NOW)]


def test_new_schedules_start_disabled_unless_created_enabled():
    assert not fold(decide(ScheduleState(), CreateSchedule(schedule()), NOW)).schedule.enabled
    assert fold(decide(ScheduleState(), CreateSchedule(schedule(enabled=True)), NOW)).schedule.enabled


def test_create_twice_is_already_exists():
    state = fold(decide(ScheduleState(), CreateSchedule(schedule()), NOW))
    with pytest.raises(AlreadyExists):
        decide(state, CreateSchedule(schedule()), NOW)


def test_recreate_after_delete_is_a_new_generation():
    state = fold([ScheduleCreated(schedule(generation=1), NOW), ScheduleDeleted(schedule().id, NOW)])
    assert decide(state, CreateSchedule(schedule()), NOW)[0].schedule.generation == 2


def test_enable_disable_are_idempotent():
    state = fold([ScheduleCreated(schedule(), NOW)])
    assert decide(state, EnableSchedule(schedule().id), NOW) == [ScheduleEnabled(schedule().id, NOW)]
    assert decide(state, DisableSchedule(schedule().id), NOW) == []
    enabled = fold([ScheduleCreated(schedule(), NOW), ScheduleEnabled(schedule().id, NOW)])
    assert decide(enabled, EnableSchedule(schedule().id), NOW) == []
    assert decide(enabled, DisableSchedule(schedule().id), NOW) == [ScheduleDisabled(schedule().id, NOW)]


def test_commands_on_a_missing_schedule_are_not_found():
    for command in (DeleteSchedule("x"), EnableSchedule("x"), DisableSchedule("x")):
        with pytest.raises(NotFound):
            decide(ScheduleState(), command, NOW)


@pytest.mark.parametrize("changes, field", [
    (dict(name=""), "schedule.name"),
    (dict(name="two words"), "schedule.name"),
    (dict(program=ProgramRef("", "a", "p")), "schedule.program.namespace"),
    (dict(program=ProgramRef("n", "a", "")), "schedule.program.program"),
    (dict(trigger=PartitionTrigger("experiments", "", 1)), "schedule.trigger.partition.dataset"),
    (dict(trigger=PartitionTrigger("experiments", "clickstream", 0)), "schedule.trigger.partition.count"),
    (dict(trigger=PartitionTrigger("experiments", "clickstream", -3)), "schedule.trigger.partition.count"),
    (dict(trigger=None), "schedule.trigger"),
    (dict(timeout_seconds=-1), "schedule.timeout"),
])
def test_invalid_schedules_name_the_field(changes, field):
    with pytest.raises(InvalidArgument) as error:
        decide(ScheduleState(), CreateSchedule(schedule(**changes)), NOW)
    assert error.value.field == field


def test_schedule_ids_are_unique_per_app_and_name():
    assert schedule_id_for(PROGRAM, "a") == schedule_id_for(PROGRAM, "a")
    assert schedule_id_for(PROGRAM, "a") != schedule_id_for(PROGRAM, "b")
    assert schedule_id_for(PROGRAM, "a") != schedule_id_for(ProgramRef("experiments", "other", "hourly_metrics"), "a")


def test_events_written_before_a_defaulted_field_existed_still_decode():
    from sluice.eventlog.codec import EventTypes
    from sluice.domain.schedules import EVENTS
    from sluice.eventlog.port import RecordedEvent

    old = (b'{"schedule":{"id":"s","name":"s","program":{"namespace":"n","app":"a","program":"p"},'
           b'"trigger":{"namespace":"n","dataset":"d","count":2},"properties":{},"timeout_seconds":0,'
           b'"priority":0,"enabled":false,"generation":1,"description":""},"at":"2026-11-22T10:00:00+00:00"}')
    event = EventTypes(EVENTS).decode(RecordedEvent("e", "schedule-s", 0, 1, "ScheduleCreated", old, {}, NOW))
    assert event.schedule.trigger == PartitionTrigger("n", "d", 2)


def test_update_is_a_new_generation_and_a_no_op_when_nothing_changed():
    from sluice.domain.schedules import ScheduleUpdated, UpdateSchedule

    state = fold([ScheduleCreated(schedule(generation=1), NOW)])
    changed = schedule(properties={"experiment": "exp-2"})
    assert decide(state, UpdateSchedule(changed), NOW) == [ScheduleUpdated(schedule(properties={"experiment": "exp-2"},
                                                                                     generation=2), NOW)]
    assert decide(state, UpdateSchedule(schedule()), NOW) == []
    with pytest.raises(NotFound):
        decide(ScheduleState(), UpdateSchedule(schedule()), NOW)
    with pytest.raises(InvalidArgument):
        decide(state, UpdateSchedule(schedule(trigger=PartitionTrigger("experiments", "clickstream", 0))), NOW)
