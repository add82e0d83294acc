"""User stories of the scheduler design (seed 000) that triggers alone express, on a simulated clock.
Stories about run constraints (6, 7) live with the checker's tests."""
from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from sluice.domain.common import ProgramRef, RunStatus
from sluice.domain.schedules import DEFAULT_CATCH_UP_SECONDS, MisfirePolicy, Schedule
from sluice.ids import run_id_for
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
from tests.scenarios.conftest import T0

GB = 1_000_000_000


def schedule(name: str, trigger, program: str = "workflow") -> Schedule:
    return Schedule("", name, ProgramRef("ns", "app", program), trigger, enabled=True)


async def test_story_1_many_time_schedules_all_fire_on_time(scheduler):
    for index in range(200):
        await scheduler.create(schedule(f"s{index}", TimeTrigger(f"{index % 60} * * * *", "UTC")))
    await scheduler.advance(timedelta(hours=1))
    assert len(scheduler.launches) == 200
    assert all(launch.at == launch.job.context.logical_time for launch in scheduler.launches)


@pytest.mark.parametrize("policy, catch_up, fired_hours", [
    (MisfirePolicy.FIRE_EACH, DEFAULT_CATCH_UP_SECONDS, [1, 2, 3, 4, 5, 6]),
    (MisfirePolicy.FIRE_EACH, 2 * 3600, [1, 3, 4, 5, 6]),  # 02:00: too old
    (MisfirePolicy.FIRE_ONCE, DEFAULT_CATCH_UP_SECONDS, [1, 4, 5, 6]),
    (MisfirePolicy.SKIP, DEFAULT_CATCH_UP_SECONDS, [1, 5, 6]),
])
async def test_story_2_no_schedule_is_skipped_across_a_failover(scheduler, policy, catch_up, fired_hours):
    await scheduler.create(replace(schedule("hourly", TimeTrigger("0 * * * *", "UTC")), misfire_policy=policy,
                                   catch_up_seconds=catch_up))
    await scheduler.advance(timedelta(hours=1))
    scheduler.clock.advance(timedelta(hours=3, minutes=30))  # the master is away for three fire times
    scheduler.matcher.recover()                               # a new master rebuilds from the log
    await scheduler.advance(timedelta(0))
    caught_up_at = T0 + timedelta(hours=4, minutes=30)
    await scheduler.advance(timedelta(hours=2))
    assert [launch.job.context.logical_time.hour for launch in scheduler.launches] == fired_hours
    assert [launch.at for launch in scheduler.launches if launch.at < T0 + timedelta(hours=5)][1:] == \
        [caught_up_at] * (len(fired_hours) - 3)
    assert [launch.at for launch in scheduler.launches][-2:] == [T0 + timedelta(hours=5), T0 + timedelta(hours=6)]


async def test_story_3_runs_only_when_data_arrives(scheduler):
    await scheduler.create(schedule("on-arrival", PartitionTrigger("ns", "feed", 1)))
    await scheduler.advance(timedelta(hours=20))
    assert scheduler.launches == []
    await scheduler.partitions("ns", "feed", {"day": "2026-11-22"})
    assert [launch.at for launch in scheduler.launches] == [T0 + timedelta(hours=20)]


async def test_story_4_b_runs_after_a_succeeds_and_not_after_a_fails(scheduler):
    await scheduler.deploy("ns", "app", ("a", "b"), (
        schedule("a", PartitionTrigger("ns", "feed", 1), program="a"),
        schedule("b-after-a", ProgramStatusTrigger("ns", "app", "a", ("COMPLETED",), 1), program="b")))
    await scheduler.partitions("ns", "feed", {"day": "1"})
    await scheduler.finish(scheduler.launches[0], RunStatus.FAILED)
    assert [launch.job.program.program for launch in scheduler.launches] == ["a"]
    await scheduler.partitions("ns", "feed", {"day": "2"})
    await scheduler.finish(scheduler.launches[1], RunStatus.COMPLETED)
    assert [launch.job.program.program for launch in scheduler.launches] == ["a", "a", "b"]
    (triggering,) = scheduler.launches[2].job.context.notifications
    assert triggering.payload.run_id == run_id_for(scheduler.launches[1].job.id)


async def test_story_5_rare_feeds_run_once_a_day_and_only_with_new_data(scheduler):
    await scheduler.create(schedule("daily-if-data", AndTrigger((TimeTrigger("0 3 * * *", "UTC"),
                                                                  PartitionTrigger("ns", "rare", 1)))))
    await scheduler.advance(timedelta(days=1))
    assert scheduler.launches == []
    await scheduler.partitions("ns", "rare", {"day": "1"})
    await scheduler.advance(timedelta(days=1))
    assert len(scheduler.launches) == 1


async def test_story_8_joins_run_when_all_inputs_arrived_or_after_a_wait(scheduler):
    both_or_wait = OrTrigger((AndTrigger((PartitionTrigger("ns", "left", 1), PartitionTrigger("ns", "right", 1))),
                              ElapsedTrigger(6 * 3600)))
    await scheduler.create(schedule("join", both_or_wait))
    await scheduler.partitions("ns", "left", {"day": "1"})
    await scheduler.partitions("ns", "right", {"day": "1"})
    assert len(scheduler.launches) == 1                       # both inputs: at once
    await scheduler.partitions("ns", "left", {"day": "2"})
    await scheduler.advance(timedelta(hours=6))
    assert len(scheduler.launches) == 2                       # only one input: after the wait, with what exists
    assert scheduler.launches[1].partition_keys == [{"day": "2"}]


async def test_story_9_runs_after_the_last_chunk_of_a_burst(scheduler):
    await scheduler.create(schedule("after-burst", QuietPeriodTrigger("ns", "feed", 15 * 60)))
    for chunk in range(4):
        await scheduler.partitions("ns", "feed", {"chunk": str(chunk)})
        await scheduler.advance(timedelta(minutes=5))
    assert scheduler.launches == []
    await scheduler.advance(timedelta(minutes=10))
    (launch,) = scheduler.launches
    assert launch.at == T0 + timedelta(minutes=15 + 15) and len(launch.partition_keys) == 4


async def test_story_10_waits_for_enough_data(scheduler):
    await scheduler.create(schedule("enough", DataSizeTrigger("ns", "ticks", 10 * GB)))
    for second in range(9):
        await scheduler.partitions("ns", "ticks", {"second": str(second)}, size_bytes=GB)
        await scheduler.advance(timedelta(seconds=1))
    assert scheduler.launches == []
    await scheduler.partitions("ns", "ticks", {"second": "9"}, size_bytes=GB)
    assert len(scheduler.launches) == 1 and len(scheduler.launches[0].partition_keys) == 10


async def test_story_11_every_four_hours_or_sooner_on_100_gb(scheduler):
    await scheduler.create(schedule("at-least-4h", OrTrigger((TimeTrigger("0 */4 * * *", "UTC"),
                                                              DataSizeTrigger("ns", "bursty", 100 * GB)))))
    await scheduler.advance(timedelta(hours=1))
    await scheduler.partitions("ns", "bursty", {"part": "1"}, size_bytes=100 * GB)
    await scheduler.advance(timedelta(hours=7))
    assert [launch.at - T0 for launch in scheduler.launches] == [timedelta(hours=1), timedelta(hours=4),
                                                                 timedelta(hours=8)]
