"""Test scenarios of the scheduler design (seed 000) on a simulated clock: which runs launched,
when, and with which arguments. Scenarios that need run constraints live with the checker's tests."""
from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from sluice.domain.common import ProgramRef
from sluice.domain.schedules import Schedule
from sluice.domain.triggers import PartitionTrigger
from tests.scenarios.conftest import T0

PROGRAM = ProgramRef("ns", "app", "workflow")


def five_partitions(properties=None) -> Schedule:
    return Schedule("", "five", PROGRAM, PartitionTrigger("ns", "feed", 5), properties or {"v": "1"}, enabled=True)


def hours(*values: int) -> list[dict[str, str]]:
    return [{"hour": f"{h:02d}"} for h in values]


async def test_scenario_4_update_discards_the_pending_job_and_counts_again(scheduler):
    schedule = await scheduler.create(five_partitions())
    await scheduler.partitions("ns", "feed", *hours(1))
    await scheduler.update(replace(five_partitions({"v": "2"})))
    await scheduler.partitions("ns", "feed", *hours(2, 3, 4, 5))
    await scheduler.advance(timedelta(seconds=10))
    assert scheduler.launches == []  # 4 partitions since the update: not yet
    await scheduler.partitions("ns", "feed", *hours(6))
    (launch,) = scheduler.launches
    assert launch.properties == {"v": "2"} and launch.job.schedule_generation == schedule.generation + 1
    assert launch.partition_keys == hours(2, 3, 4, 5, 6)


async def test_scenario_6_delete_discards_the_pending_job(scheduler):
    await scheduler.create(five_partitions())
    await scheduler.partitions("ns", "feed", *hours(1, 2, 3, 4))
    await scheduler.delete(five_partitions())
    await scheduler.partitions("ns", "feed", *hours(5))
    await scheduler.advance(timedelta(seconds=10))
    assert scheduler.launches == []


async def test_scenario_2_properties_reach_the_program_before_and_after_an_update(scheduler):
    one = replace(five_partitions(), trigger=PartitionTrigger("ns", "feed", 1))
    await scheduler.create(one)
    await scheduler.partitions("ns", "feed", *hours(1))
    await scheduler.finish(scheduler.launches[0])
    await scheduler.update(replace(one, properties={"v": "2"}))
    await scheduler.partitions("ns", "feed", *hours(2))
    assert [launch.properties for launch in scheduler.launches] == [{"v": "1"}, {"v": "2"}]


async def test_disabled_schedules_do_not_launch_and_enabling_listens_again(scheduler):
    schedule = await scheduler.create(replace(five_partitions(), trigger=PartitionTrigger("ns", "feed", 1), enabled=False))
    await scheduler.partitions("ns", "feed", *hours(1))
    assert scheduler.launches == []
    scheduler.registry.enable(schedule.id)
    await scheduler.pump()
    await scheduler.partitions("ns", "feed", *hours(2))
    assert [launch.partition_keys for launch in scheduler.launches] == [hours(2)]
    assert scheduler.launches[0].at == T0


def app_schedule(name: str, count: int, program: str = "workflow") -> Schedule:
    return Schedule("", name, ProgramRef("ns", "app", program), PartitionTrigger("ns", "feed", count), {"v": name},
                    enabled=True)


async def test_scenario_3_redeployment_honours_update_schedules(scheduler):
    await scheduler.deploy("ns", "app", ("workflow",), (app_schedule("keep", 1), app_schedule("change", 1),
                                                        app_schedule("drop", 1)))
    original = {s.name: s for s in scheduler.registry.list("ns", "app")}

    # Not allowed to update schedules: the original set stays, and only it launches.
    await scheduler.deploy("ns", "app", ("workflow",), (app_schedule("keep", 1), app_schedule("change", 2),
                                                        app_schedule("new", 1)), update_schedules=False)
    assert {s.name: s for s in scheduler.registry.list("ns", "app")} == original
    await scheduler.partitions("ns", "feed", {"hour": "01"})
    assert sorted(launch.properties["v"] for launch in scheduler.launches) == ["change", "drop", "keep"]

    # Allowed: removed ones are deleted, changed ones replaced (a new generation), new ones created.
    plan = await scheduler.deploy("ns", "app", ("workflow",), (app_schedule("keep", 1), app_schedule("change", 2),
                                                               app_schedule("new", 1)))
    schedules = {s.name: s for s in scheduler.registry.list("ns", "app")}
    assert sorted(schedules) == ["change", "keep", "new"]
    assert schedules["keep"] == original["keep"]
    assert schedules["change"].generation == 2 and schedules["change"].trigger.count == 2
    assert len(plan) == 4  # the app, "change", "new" and "drop"
    scheduler.launches.clear()
    await scheduler.partitions("ns", "feed", {"hour": "02"})
    assert sorted(launch.properties["v"] for launch in scheduler.launches) == ["keep", "new"]


async def test_removing_a_program_deletes_its_schedules_even_without_update(scheduler):
    await scheduler.deploy("ns", "app", ("workflow", "old"), (app_schedule("w", 1), app_schedule("o", 1, "old")))
    await scheduler.deploy("ns", "app", ("workflow",), (), update_schedules=False)
    assert [s.name for s in scheduler.registry.list("ns", "app")] == ["w"]
