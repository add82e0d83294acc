"""Every trigger kind survives the protobuf edge unchanged, and bad ones are rejected naming the field."""
import pytest

from sluice.domain.common import ProgramRef
from sluice.domain.schedules import Schedule
from sluice.domain.triggers import (
    AndTrigger,
    DataSizeTrigger,
    ElapsedTrigger,
    OrTrigger,
    PartitionTrigger,
    ProgramStatusTrigger,
    QuietPeriodTrigger,
    TimeTrigger,
)
from sluice.domain.errors import InvalidArgument
from sluice.v1 import schedules_pb2 as pb
from sluice.wire.schedules import schedule_from_proto, schedule_to_proto, trigger_to_proto

PROGRAM = ProgramRef("experiments", "clickstream", "daily_metrics")
EVERY_KIND = OrTrigger((
    AndTrigger((PartitionTrigger("experiments", "clickstream", 24, {"marketplace": ("JP",)}),
                DataSizeTrigger("experiments", "clickstream", 10_000_000, {}))),
    TimeTrigger("0 2 * * *", "Asia/Tokyo"),
    ProgramStatusTrigger("experiments", "clickstream", "hourly_metrics", ("COMPLETED", "FAILED"), 2),
    QuietPeriodTrigger("experiments", "clickstream", 900, {}),
    ElapsedTrigger(6 * 3600),
))


def test_every_kind_round_trips_through_protobuf():
    schedule = Schedule("s", "daily", PROGRAM, EVERY_KIND, enabled=True)
    assert schedule_from_proto(schedule_to_proto(schedule), "s") == schedule


@pytest.mark.parametrize("trigger, field", [
    (TimeTrigger("61 * * * *", "UTC"), "schedule.trigger.time.cron"),
    (TimeTrigger("0 2 * * *", "Mars/Olympus"), "schedule.trigger.time.zone"),
    (AndTrigger(()), "schedule.trigger.and.all_of"),
    (OrTrigger((PartitionTrigger("n", "d", 1), ElapsedTrigger(-5))), "schedule.trigger.or.any_of[1].elapsed.seconds"),
    (ProgramStatusTrigger("n", "a", "p", (), 1), "schedule.trigger.program_status.statuses"),
])
def test_bad_triggers_from_clients_name_the_field(trigger, field):
    message = schedule_to_proto(Schedule("s", "daily", PROGRAM, PartitionTrigger("n", "d", 1)))
    message.trigger.CopyFrom(trigger_to_proto(trigger))
    with pytest.raises(InvalidArgument) as error:
        schedule_from_proto(message, "s")
    assert error.value.field == field


def test_time_trigger_without_zone_is_utc_never_the_server_zone():
    message = pb.Trigger(time=pb.TimeTrigger(cron="0 2 * * *"))
    schedule = schedule_to_proto(Schedule("s", "daily", PROGRAM, PartitionTrigger("n", "d", 1)))
    schedule.trigger.CopyFrom(message)
    assert schedule_from_proto(schedule, "s").trigger == TimeTrigger("0 2 * * *", "UTC")


def test_an_unknown_run_status_number_is_refused_naming_its_place():
    schedule = schedule_to_proto(Schedule("s", "daily", PROGRAM, PartitionTrigger("n", "d", 1)))
    schedule.trigger.CopyFrom(pb.Trigger(program_status=pb.ProgramStatusTrigger(namespace="n", app="a", program="p",
                                                                                   statuses=[3, -1], count=1)))
    with pytest.raises(InvalidArgument) as error:
        schedule_from_proto(schedule, "s")
    assert error.value.field == "schedule.trigger.program_status.statuses[1]"


@pytest.mark.parametrize("zone", ["Europe", "A" * 300])
def test_a_schedule_change_naming_a_zone_that_is_no_file_is_malformed_not_an_infrastructure_failure(zone):
    """ZoneInfo raises OSError for a directory of the zone database or a name too long for a file; the
    consumer loop waits an OSError out as infrastructure, so the record stalled its partition for ever."""
    from sluice.bus.port import Record
    from sluice.runtime.errors import is_infrastructure
    from sluice.wire.schedules import parse_schedule_change
    change = pb.ScheduleChanged(schedule_id="s", schedule=schedule_to_proto(
        Schedule("s", "daily", PROGRAM, TimeTrigger("0 2 * * *", "UTC"))))
    change.schedule.trigger.time.zone = zone
    with pytest.raises(InvalidArgument) as error:
        parse_schedule_change(Record("sluice.schedules", 0, 0, b"s", change.SerializeToString(), (), 0))
    assert error.value.field == "schedule.trigger.time.zone" and not is_infrastructure(error.value)
