"""A schedule's run time limit (max_run_seconds): 0 or 1 s to 30 days, kept through the wire and the event
log, copied into every job its trigger fires (what the launcher enforces), and given to the CLI as a duration."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from sluice.cli.durations import parse_seconds
from sluice.cli.output import UsageError
from sluice.domain import bounds, schedules
from sluice.domain.errors import InvalidArgument
from sluice.domain.matching import MatchNotification
from sluice.eventlog.codec import dumps, from_jsonable
from sluice.v1 import jobs_pb2
from sluice.wire.jobs import job_from_proto, job_to_proto
from sluice.wire.schedules import schedule_from_proto, schedule_to_proto
from tests.unit.test_matching import T0, notification, observed, run, schedule


@pytest.mark.parametrize("seconds", [0, 1, 3600, bounds.MAX_RUN_SECONDS])
def test_no_limit_and_one_second_to_thirty_days_are_accepted(seconds):
    schedules.validate(replace(schedule(), max_run_seconds=seconds))


@pytest.mark.parametrize("seconds, text", [(-1, "at least 1"), (bounds.MAX_RUN_SECONDS + 1, "at most 2592000"),
                                           (2**63 - 1, "at most 2592000")])
def test_a_limit_out_of_range_names_the_field_and_the_range(seconds, text):
    with pytest.raises(InvalidArgument) as raised:
        schedules.validate(replace(schedule(), max_run_seconds=seconds))
    assert raised.value.field == "schedule.max_run_seconds" and text in raised.value.message


def test_the_limit_survives_the_wire_and_the_event_log():
    limited = replace(schedule(), max_run_seconds=5400)
    assert schedule_from_proto(schedule_to_proto(limited), limited.id) == limited
    created = schedules.ScheduleCreated(limited, T0)
    assert from_jsonable(schedules.ScheduleCreated, json.loads(dumps(created))) == created


def test_an_event_recorded_before_the_field_existed_reads_as_no_limit():
    recorded = json.loads(dumps(schedules.ScheduleCreated(schedule(), T0)))
    del recorded["schedule"]["max_run_seconds"]
    assert from_jsonable(schedules.ScheduleCreated, recorded).schedule.max_run_seconds == 0


def test_a_fired_job_carries_the_schedules_limit_to_the_launcher():
    _, events = run(observed(replace(schedule(), max_run_seconds=90)), MatchNotification(notification(1)))
    job = events[-1].job
    assert job.max_run_seconds == 90
    message = jobs_pb2.Job.FromString(job_to_proto(job).SerializeToString())
    assert message.max_run_seconds == 90 and job_from_proto(message).max_run_seconds == 90


def test_a_job_without_a_limit_says_zero():
    _, events = run(observed(schedule()), MatchNotification(notification(1)))
    assert job_to_proto(events[-1].job).max_run_seconds == 0


@pytest.mark.parametrize("text, seconds", [("90", 90), ("90s", 90), ("45m", 2700), ("2h", 7200), ("1d", 86400),
                                           ("1h30m", 5400), (" 2H ", 7200), ("0", 0)])
def test_durations_the_cli_reads(text, seconds):
    assert parse_seconds(text, "--max-run-time") == seconds


@pytest.mark.parametrize("text", ["", "h", "1x", "1.5h", "-5m", "1h 30m", "m30"])
def test_a_malformed_duration_is_a_usage_error_naming_the_option(text):
    with pytest.raises(UsageError, match="--max-run-time: expected a duration"):
        parse_seconds(text, "--max-run-time")
