"""A fire whose notifications would make a job message over the bus limit fires several jobs at that
moment (sluice.domain.bounds.JOB_NOTIFICATIONS_BYTES): every partition still reaches one run."""
from __future__ import annotations

from collections import Counter

from sluice.bus.topics import DEAD_LETTER
from sluice.domain.constraints import ConcurrencyConstraint
from sluice.domain.schedules import Schedule
from sluice.domain.triggers import PartitionTrigger
from tests.scenarios.test_seed_scenarios import PROGRAM

PARTITIONS = 2_000
"""Single-partition notifications of ~140 bytes each in a job: about 280 KB, over the 256 KiB a bus message holds."""


async def dead_letters(scheduler) -> list:
    consumer = scheduler.bus.consumer("probe-dead-letters", [DEAD_LETTER])
    try:
        return await consumer.poll(timeout=0)
    finally:
        await consumer.close()


async def test_a_fire_over_the_bus_limit_runs_every_partition_once_in_jobs_that_fit(scheduler):
    await scheduler.create(Schedule("", "many", PROGRAM, PartitionTrigger("ns", "feed", PARTITIONS), {"v": "1"},
                                    enabled=True))
    for index in range(PARTITIONS):
        await scheduler.partitions("ns", "feed", {"marketplace": "US", "date": f"2026-11-{index // 100 + 1:02d}",
                                                                "part": f"{index:05d}"})

    assert await dead_letters(scheduler) == []
    assert len(scheduler.launches) > 1
    keys = Counter(key["part"] for launch in scheduler.launches for key in launch.partition_keys)
    assert keys == Counter(f"{index:05d}" for index in range(PARTITIONS))  # each partition in exactly one run
    assert len({launch.at for launch in scheduler.launches}) == 1  # fired at the trigger's moment, together
    in_order = [key["part"] for launch in sorted(scheduler.launches, key=lambda launch: launch.job.sequence)
                for key in launch.partition_keys]
    assert in_order == sorted(in_order)  # the jobs take the notifications in their arrival order


async def test_parts_that_wait_on_a_constraint_are_not_joined_back_over_the_bus_limit(scheduler):
    """One run at a time (WaitingJobPolicy.JOIN, the default): the parts after the first wait, and a later
    fire's jobs join a waiting one only while the two fit one job."""
    await scheduler.create(Schedule("", "one-at-a-time", PROGRAM, PartitionTrigger("ns", "feed", PARTITIONS),
                                    {"v": "1"}, enabled=True, constraints=(ConcurrencyConstraint(1),)))
    for first in range(0, 3 * PARTITIONS, 10):  # three fires, of notifications of ten partitions
        await scheduler.partitions("ns", "feed", *({"marketplace": "US", "date": "2026-11-22", "part": f"{index:05d}"}
                                                   for index in range(first, first + 10)))
    finished = 0
    while finished < len(scheduler.launches):  # each run ends; the next waiting job launches
        await scheduler.finish(scheduler.launches[finished])
        finished += 1

    assert await dead_letters(scheduler) == []
    assert len(scheduler.launches) > 1
    keys = Counter(key["part"] for launch in scheduler.launches for key in launch.partition_keys)
    assert keys == Counter(f"{index:05d}" for index in range(3 * PARTITIONS))
