"""The clickstream app's datasets and daily schedules: valid requests, and the daily trigger fires
when a marketplace's 24 hourly partitions exist, or at 02:00 in its own zone with what exists."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from sluice.domain.common import Notification, PartitionCommitted, PartitionRef
from sluice.domain.datasets import KeyType, validate_dataset
from sluice.domain.schedules import validate
from sluice.domain.triggers import evaluate, observe, start
from sluice.wire.datasets import dataset_from_proto
from sluice.wire.schedules import schedule_from_proto
from sluice_examples.clickstream import datasets as clickstream
from sluice_examples.clickstream.generate import MARKETPLACES

T0 = datetime(2026, 11, 22, 0, 30, tzinfo=timezone.utc)


def test_the_datasets_are_valid_and_typed(tmp_path):
    specs = [validate_dataset(dataset_from_proto(r.dataset)) for r in clickstream.datasets_requests(tmp_path)]
    assert [s.name for s in specs] == ["clickstream", "clickstream_hourly_metrics", "clickstream_daily_metrics"]
    assert [k.type for k in specs[1].partition_keys] == [KeyType.STRING, KeyType.DATE, KeyType.INT]
    assert specs[2].base_location == str(tmp_path / "experiments" / "clickstream_daily_metrics")


def test_one_valid_daily_schedule_per_marketplace():
    schedules = [schedule_from_proto(s, f"id-{i}") for i, s in enumerate(clickstream.daily_schedules())]
    for schedule in schedules:
        validate(schedule)
    assert {s.properties["marketplace"] for s in schedules} == set(MARKETPLACES)
    assert all(s.program.program == "daily_metrics" for s in schedules)


def hour_notification(marketplace: str, hour: int) -> Notification:
    key = {"marketplace": marketplace, "date": "2026-11-22", "hour": str(hour)}
    return Notification(f"{marketplace}-{hour}", T0, PartitionCommitted(
        "experiments", "clickstream_hourly_metrics", (PartitionRef(key, f"/m/{marketplace}/{hour}"),)))


@pytest.mark.parametrize("marketplace", sorted(MARKETPLACES))
def test_the_daily_trigger_fires_on_the_24th_hour_of_its_marketplace(marketplace):
    (schedule,) = [schedule_from_proto(s, "id") for s in clickstream.daily_schedules()
                   if s.properties["marketplace"] == marketplace]
    trigger = schedule.trigger
    state = start(trigger, T0)
    now = T0
    for hour in range(23):
        now += timedelta(minutes=1)
        state = observe(trigger, state, hour_notification(marketplace, hour), now)
        other = "JP" if marketplace != "JP" else "US"
        state = observe(trigger, state, hour_notification(other, hour), now)   # another marketplace's hours
    evaluation = evaluate(trigger, state, now)
    assert not evaluation.satisfied
    wake = evaluation.wake_at.astimezone(ZoneInfo(MARKETPLACES[marketplace]))
    assert (wake.hour, wake.minute) == (2, 0), "without the 24th hour it runs at 02:00 local time"
    assert evaluate(trigger, state, evaluation.wake_at).satisfied
    state = observe(trigger, state, hour_notification(marketplace, 23), now)
    assert evaluate(trigger, state, now).satisfied
