"""Seed 000's test scenarios and user stories that need run constraints (scenarios 1, 5, 7, 8;
stories 6, 7), on the real registry, matcher and checker over a simulated clock: which runs
launched, when, and with which arguments."""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from sluice.domain.common import ProgramRef, RunStatus
from sluice.ids import run_id_for
from sluice.domain.constraints import (
    Capacity,
    ConcurrencyConstraint,
    DelayConstraint,
    MaxRunsPerWindowConstraint,
    MinSinceLastRunConstraint,
    NotMetPolicy,
    TimeoutPolicy,
    TimeWindowConstraint,
)
from sluice.domain.jobs import JobState, WaitingJobPolicy
from sluice.domain.schedules import Schedule
from sluice.domain.triggers import OrTrigger, PartitionTrigger, TimeTrigger
from tests.scenarios.conftest import T0
from tests.support.simulated import SimulatedScheduler

PROGRAM = ProgramRef("ns", "app", "workflow")
MINUTE = timedelta(minutes=1)


def on_partitions(name: str, count: int, *constraints, program: ProgramRef = PROGRAM, **fields) -> Schedule:
    return Schedule("", name, program, PartitionTrigger("ns", name, count), {"v": "1"}, enabled=True,
                    constraints=constraints, **fields)


def hours(*values: int) -> list[dict[str, str]]:
    return [{"hour": f"{h:02d}"} for h in values]


def states(scheduler: SimulatedScheduler, schedule_id: str) -> list[tuple[JobState, str]]:
    return [(view.state, view.reason) for view in scheduler.jobs.list(schedule_id)]


async def test_scenario_1_minimum_interval_between_runs(scheduler):
    # "any new partition", at least 5 minutes between runs; five partitions over five minutes
    schedule = await scheduler.create(on_partitions("feed", 1, MinSinceLastRunConstraint(300, NotMetPolicy.ABORT)))
    for hour in range(5):  # at 0, 1, 2, 3 and 4 minutes
        await scheduler.partitions("ns", "feed", *hours(hour))
        await scheduler.advance(MINUTE)
    (launch,) = scheduler.launches
    assert launch.at == T0 and launch.partition_keys == hours(0)
    discarded = [reason for state, reason in states(scheduler, schedule.id) if state is JobState.DISCARDED]
    assert len(discarded) == 4 and all("started less than 300 s ago" in r for r in discarded)


async def test_scenario_1_waiting_later_partitions_join_the_waiting_job_and_one_run_gets_them(scheduler):
    """Seed 000's job queue: a notification joins the schedule's job unless that job is PENDING_LAUNCH."""
    schedule = await scheduler.create(on_partitions("feed", 1, MinSinceLastRunConstraint(300)))
    for hour in range(5):  # at 0, 1, 2, 3 and 4 minutes
        await scheduler.partitions("ns", "feed", *hours(hour))
        await scheduler.advance(MINUTE)
    await scheduler.advance(timedelta(minutes=15))
    assert [(launch.at - T0, launch.partition_keys) for launch in scheduler.launches] == [
        (timedelta(0), hours(0)), (timedelta(minutes=5), hours(1, 2, 3, 4))]
    jobs = scheduler.jobs.list(schedule.id)
    assert [view.state for view in jobs] == [JobState.LAUNCHED, JobState.LAUNCHED] + [JobState.JOINED] * 3
    assert all(view.reason == f"joined job {jobs[1].id}" for view in jobs[2:])
    assert jobs[1].notifications == 4 and jobs[1].job.context.partitions() == scheduler.launches[1].job.context.partitions()


async def test_partitions_arriving_faster_than_the_interval_make_one_run_per_interval_and_no_backlog(scheduler):
    await scheduler.create(on_partitions("feed", 1, MinSinceLastRunConstraint(300)))
    for n in range(30):  # one a minute for half an hour
        await scheduler.partitions("ns", "feed", {"n": str(n)})
        await scheduler.advance(MINUTE)
        assert len(scheduler.checker.state.queue) <= 1
    await scheduler.advance(timedelta(minutes=5))
    assert [launch.at - T0 for launch in scheduler.launches] == [timedelta(minutes=m) for m in range(0, 31, 5)]
    delivered = [key["n"] for launch in scheduler.launches for key in launch.partition_keys]
    assert delivered == [str(n) for n in range(30)]  # each once, in order


async def test_scenario_1_waiting_with_separate_jobs_spaces_one_run_per_partition(scheduler):
    await scheduler.create(on_partitions("feed", 1, MinSinceLastRunConstraint(300),
                                         waiting_job_policy=WaitingJobPolicy.SEPARATE))
    for hour in range(3):
        await scheduler.partitions("ns", "feed", *hours(hour))
        await scheduler.advance(timedelta(seconds=75))
    await scheduler.advance(timedelta(minutes=15))
    assert [(launch.at - T0, launch.partition_keys) for launch in scheduler.launches] == [
        (timedelta(0), hours(0)), (timedelta(minutes=5), hours(1)), (timedelta(minutes=10), hours(2))]


async def test_scenario_5_update_discards_a_job_waiting_on_its_delay(scheduler):
    await scheduler.create(on_partitions("feed", 5, DelayConstraint(600)))
    await scheduler.partitions("ns", "feed", *hours(1, 2, 3, 4, 5))
    await scheduler.advance(timedelta(minutes=1))
    updated = await scheduler.update(replace(on_partitions("feed", 3, DelayConstraint(0)), properties={"v": "2"}))
    await scheduler.partitions("ns", "feed", *hours(6, 7, 8))
    await scheduler.advance(timedelta(minutes=30))
    (launch,) = scheduler.launches
    assert launch.at == T0 + MINUTE and launch.properties == {"v": "2"}
    assert launch.partition_keys == hours(6, 7, 8) and launch.job.schedule_generation == updated.generation
    assert (JobState.DISCARDED, "schedule updated") in states(scheduler, updated.id)


async def test_scenario_7_delete_just_before_the_delay_ends_launches_nothing(scheduler):
    schedule = await scheduler.create(on_partitions("feed", 5, DelayConstraint(40)))
    await scheduler.partitions("ns", "feed", *hours(1, 2, 3, 4, 5))
    await scheduler.advance(timedelta(seconds=39.5))
    await scheduler.delete(schedule)
    await scheduler.advance(timedelta(minutes=5))
    assert scheduler.launches == []
    assert states(scheduler, schedule.id) == [(JobState.DISCARDED, "schedule deleted")]
    assert scheduler.checker.next_wake_at() is None


async def test_scenario_8_launches_only_when_the_trigger_and_every_constraint_hold(scheduler):
    # window 01:00-02:00 UTC, 2 minutes after the trigger, one run at a time, 10 minutes apart
    constraints = (TimeWindowConstraint("01:00", "02:00"), DelayConstraint(120), ConcurrencyConstraint(1),
                   MinSinceLastRunConstraint(600))
    schedule = await scheduler.create(on_partitions("feed", 2, *constraints))
    await scheduler.partitions("ns", "feed", *hours(1))
    await scheduler.advance(timedelta(minutes=59))
    assert scheduler.launches == []                      # the trigger wants 2 partitions
    await scheduler.partitions("ns", "feed", *hours(2))  # 00:59: trigger fires; window opens 01:00
    await scheduler.advance(timedelta(minutes=1, seconds=59))
    assert scheduler.launches == []                      # 01:00:59 inside the window, delay until 01:01
    await scheduler.advance(timedelta(seconds=1))
    (first,) = scheduler.launches
    assert first.at == T0 + timedelta(hours=1, minutes=1)
    await scheduler.partitions("ns", "feed", *hours(3, 4))  # 01:01: fires again, first still running
    await scheduler.advance(timedelta(minutes=30))
    assert len(scheduler.launches) == 1
    (waiting,) = scheduler.checker.waiting().values()
    assert any("running" in reason for reason in waiting.reasons) and waiting.next_check is None
    await scheduler.finish(first)                        # 01:31: ends; interval (10 min) has passed
    second = scheduler.launches[1]
    assert second.at == T0 + timedelta(hours=1, minutes=31) and second.partition_keys == hours(3, 4)
    await scheduler.finish(second)
    await scheduler.partitions("ns", "feed", *hours(5, 6))  # 01:31 again: min interval to 01:41
    await scheduler.advance(timedelta(minutes=10))
    assert [launch.at for launch in scheduler.launches][2:] == [T0 + timedelta(hours=1, minutes=41)]
    await scheduler.finish(scheduler.launches[2])
    await scheduler.partitions("ns", "feed", *hours(7, 8))  # 01:41: the window closes at 02:00 ...
    await scheduler.advance(timedelta(minutes=18))
    await scheduler.finish(scheduler.launches[3])
    await scheduler.partitions("ns", "feed", *hours(9, 10))  # 01:59: ... and this one waits for 01:00 tomorrow
    await scheduler.advance(timedelta(hours=24))
    assert [launch.at for launch in scheduler.launches][3:] == [T0 + timedelta(hours=1, minutes=51),
                                                                T0 + timedelta(days=1, hours=1)]
    assert [view.state for view in scheduler.jobs.list(schedule.id)] == [JobState.LAUNCHED] * 5  # the launcher started each


@pytest.fixture
def loaded(tmp_path):
    simulated = SimulatedScheduler(tmp_path, T0, Capacity(limit=2, high_priority=10, hard_limit=3))
    yield simulated
    simulated.close()


async def test_story_6_high_priority_on_time_low_priority_catches_up_when_load_drops(loaded):
    def feed(name: str, priority: int) -> Schedule:
        return on_partitions(name, 1, program=ProgramRef("ns", "lake", name), priority=priority)

    for name, priority in (("low1", 0), ("low2", 0), ("low3", 0), ("high1", 10), ("high2", 10)):
        await loaded.create(feed(name, priority))
    for name in ("low1", "low2", "low3"):
        await loaded.partitions("ns", name, *hours(0))
    await loaded.advance(MINUTE)
    assert [launch.job.context.schedule_name for launch in loaded.launches] == ["low1", "low2"]  # soft limit 2
    await loaded.partitions("ns", "high1", *hours(0))
    await loaded.partitions("ns", "high2", *hours(0))
    # high priority launches on time past the soft limit, up to the hard limit (3): high2 waits
    assert [launch.job.context.schedule_name for launch in loaded.launches] == ["low1", "low2", "high1"]
    by_name = {launch.job.context.schedule_name: launch for launch in loaded.launches}
    await loaded.advance(MINUTE)
    await loaded.finish(by_name["low1"])       # 2 going: high2 takes the slot, low3 still over the soft limit
    assert [launch.job.context.schedule_name for launch in loaded.launches][3:] == ["high2"]
    await loaded.finish(by_name["low2"])
    await loaded.finish(by_name["high1"])      # 1 going: low3 catches up
    assert [launch.job.context.schedule_name for launch in loaded.launches][4:] == ["low3"]
    assert loaded.launches[-1].at == T0 + 2 * MINUTE


async def test_story_7_maintenance_runs_once_a_night_in_its_window_only_with_new_data(tmp_path):
    new_york = "America/New_York"
    start = datetime(2026, 6, 1, 16, tzinfo=timezone.utc)  # 12:00 EDT
    scheduler = SimulatedScheduler(tmp_path, start)
    try:
        await scheduler.create(on_partitions("feed", 1, TimeWindowConstraint("22:00", "06:00", new_york),
                                             MaxRunsPerWindowConstraint(1, "day", new_york),
                                             MinSinceLastRunConstraint(12 * 3600)))
        await scheduler.advance(timedelta(hours=3))
        await scheduler.partitions("ns", "feed", *hours(15))   # 15:00 EDT: new data, outside the window
        await scheduler.advance(timedelta(hours=10))
        (first,) = scheduler.launches
        assert first.at == datetime(2026, 6, 2, 2, tzinfo=timezone.utc)  # 22:00 EDT
        await scheduler.finish(first)
        await scheduler.partitions("ns", "feed", *hours(23))   # 23:00 EDT, same night: waits a night
        await scheduler.advance(timedelta(days=1))
        assert [launch.at for launch in scheduler.launches][1:] == [datetime(2026, 6, 3, 2, tzinfo=timezone.utc)]
        await scheduler.finish(scheduler.launches[1])
        await scheduler.advance(timedelta(days=2))               # no new data: no run
        assert len(scheduler.launches) == 2
    finally:
        scheduler.close()


async def test_two_schedules_never_both_take_the_last_slot_of_a_group(scheduler):
    group = ConcurrencyConstraint(1, group="warehouse")
    await scheduler.create(on_partitions("a", 1, group, program=ProgramRef("ns", "app", "load_a")))
    await scheduler.create(on_partitions("b", 1, group, program=ProgramRef("ns", "app", "load_b")))
    await scheduler.partitions("ns", "a", *hours(1))
    await scheduler.partitions("ns", "b", *hours(1))
    (first,) = scheduler.launches
    assert first.job.context.schedule_name == "a"
    await scheduler.finish(first, RunStatus.FAILED)
    assert [launch.job.context.schedule_name for launch in scheduler.launches] == ["a", "b"]


async def test_timeout_discards_or_forces_the_launch(scheduler):
    closed = TimeWindowConstraint("12:00", "13:00")
    discard = await scheduler.create(on_partitions("discard", 1, closed, timeout_seconds=3600))
    force = await scheduler.create(on_partitions("force", 1, closed, timeout_seconds=3600,
                                                 timeout_policy=TimeoutPolicy.FORCE_LAUNCH))
    await scheduler.partitions("ns", "discard", *hours(1))
    await scheduler.partitions("ns", "force", *hours(1))
    await scheduler.advance(timedelta(hours=2))
    (forced,) = scheduler.launches
    assert forced.job.schedule_id == force.id and forced.at == T0 + timedelta(hours=1)
    ((state, reason),) = states(scheduler, discard.id)
    assert state is JobState.DISCARDED and reason.startswith("timed out 3600 s after its trigger")
    assert "outside the window 12:00-13:00 UTC" in reason
    history = [t.cause for t in scheduler.jobs.list(force.id)[0].history]
    assert history[-1] == f"run {run_id_for(forced.job.id)}"  # the launcher started it
    assert history[-2] == "timed out, launch forced" and history[-3].startswith("waiting for: outside the window")


async def test_disabling_discards_a_waiting_job_and_enabling_listens_again(scheduler):
    schedule = await scheduler.create(on_partitions("feed", 1, DelayConstraint(600)))
    await scheduler.partitions("ns", "feed", *hours(1))
    scheduler.registry.disable(schedule.id)
    await scheduler.pump()
    await scheduler.advance(timedelta(hours=1))
    assert scheduler.launches == [] and states(scheduler, schedule.id) == [(JobState.DISCARDED, "schedule disabled")]
    scheduler.registry.enable(schedule.id)
    await scheduler.pump()
    await scheduler.partitions("ns", "feed", *hours(2))
    await scheduler.advance(timedelta(minutes=10))
    assert [launch.partition_keys for launch in scheduler.launches] == [hours(2)]


async def test_a_restarted_checker_keeps_waiting_jobs_their_timers_and_nothing_twice(scheduler):
    await scheduler.create(on_partitions("feed", 1, DelayConstraint(600)))
    await scheduler.create(on_partitions("now", 1))
    await scheduler.partitions("ns", "feed", *hours(1))
    await scheduler.partitions("ns", "now", *hours(1))
    assert len(scheduler.launches) == 1
    scheduler.checker.recover()
    assert scheduler.checker.next_wake_at() == T0 + timedelta(minutes=10)
    await scheduler.advance(timedelta(minutes=10))
    assert [launch.job.context.schedule_name for launch in scheduler.launches] == ["now", "feed"]
    scheduler.checker.recover()
    await scheduler.advance(timedelta(hours=1))
    assert len(scheduler.launches) == 2


async def test_time_trigger_jobs_carry_their_logical_time_through_the_checker(scheduler):
    await scheduler.create(Schedule("", "nightly", PROGRAM, OrTrigger((TimeTrigger("0 2 * * *", "UTC"),)),
                                    enabled=True, constraints=(DelayConstraint(300),)))
    await scheduler.advance(timedelta(hours=3))
    (launch,) = scheduler.launches
    assert launch.job.context.logical_time == T0 + timedelta(hours=2)
    assert launch.at == T0 + timedelta(hours=2, minutes=5)
