"""The CLI's pure helpers: a run error's lead line, triggers and waiting jobs in words, id prefixes,
JSON with 64-bit numbers as numbers."""
from __future__ import annotations

import pytest
from google.protobuf import timestamp_pb2

from sluice.cli import describe, ids
from sluice.cli.output import Refused, UsageError, jsonable
from sluice.v1 import schedules_pb2 as spb


@pytest.mark.parametrize("error, lead", [
    ("exit code 1: ^^^^^^^^ | File \"x.py\", line 3, in main | ValueError: bad input",
     "exit code 1: ValueError: bad input | ^^^^^^^^ | File \"x.py\", line 3, in main | ValueError: bad input"),
    ("exit code 1: ValueError: bad input | Traceback", "exit code 1: ValueError: bad input | Traceback"),
    ("exit code 1: py4j | pyspark.errors.exceptions.captured.AnalysisException: no column x",
     "exit code 1: pyspark.errors.exceptions.captured.AnalysisException: no column x | py4j | "
     "pyspark.errors.exceptions.captured.AnalysisException: no column x"),
    ("exit code 2: usage: something | Note: not an exception", "exit code 2: usage: something | Note: not an exception"),
    ("publishing outputs failed: ValueError: x", "publishing outputs failed: ValueError: x"),
])
def test_error_lead_puts_the_exception_line_first(error, lead):
    assert describe.error_lead(error) == lead


def test_waiting_for_describes_the_trigger():
    at = timestamp_pb2.Timestamp(seconds=1_800_000_000)
    partition = spb.Trigger(partition=spb.PartitionTrigger(namespace="ns", dataset="ds", count=2))
    daily = spb.Trigger(time=spb.TimeTrigger(cron="0 2 * * *", zone="Asia/Tokyo"))
    either = spb.Trigger(**{"or": spb.OrTrigger(any_of=[partition, daily])})
    assert describe.waiting_for(partition, at, at) == "2 partitions of ns.ds"
    assert describe.waiting_for(partition, at, at, 1) == "2 partitions of ns.ds; 1 notification so far"
    assert describe.waiting_for(either, at, at) == "(2 partitions of ns.ds) or (cron at 02:00 Asia/Tokyo)"
    quiet = spb.Trigger(quiet_period=spb.QuietPeriodTrigger(namespace="ns", dataset="ds", quiet_seconds=60))
    assert describe.waiting_for(quiet, at, at).startswith("quiet until 2027-01-15 08:01:00 (60s without data")
    assert describe.cron_text("*/5 * * * *") == "'*/5 * * * *'"


def test_id_prefixes():
    found = [("356ff01a-1", "a"), ("356ff01b-2", "b"), ("9abc-3", "c")]
    assert ids.resolve("schedule", "9", found) == "9abc-3"
    assert ids.resolve("schedule", "356ff01a-1", found) == "356ff01a-1"
    assert ids.resolve("schedule", "f", found) is None
    with pytest.raises(Refused) as ambiguous:
        ids.resolve("schedule", "356ff01", found)
    assert str(ambiguous.value).startswith("INVALID_ARGUMENT: schedule id prefix '356ff01' is ambiguous: 2")
    assert [line.split()[0] for line in ambiguous.value.details] == ["356ff01a-1", "356ff01b-2"]
    with pytest.raises(UsageError):
        ids.resolve("run", " ", found)


def test_jsonable_keeps_64_bit_numbers_numbers():
    schedule = spb.Schedule(generation=3, trigger=spb.Trigger(data_size=spb.DataSizeTrigger(min_bytes=2**40)))
    schedule.timeout.seconds = 60
    assert jsonable(schedule) == {"generation": 3, "trigger": {"dataSize": {"minBytes": 2**40}}, "timeout": "60s"}
