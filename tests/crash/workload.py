"""The crash harness's workload: apps whose schedules use every trigger kind, and a seeded stream
of partition notifications over a simulated day (bursts, sizes, filtered keys).

Program-status notifications come from the launcher as the runs the workload causes end
(COMPLETED or FAILED, see programs.py), and feed the program-status schedules in turn."""
from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from sluice.domain.apps import DeployApp, ProgramSpec
from sluice.domain.common import Notification, PartitionCommitted, PartitionRef, ProgramRef
from sluice.domain.constraints.specs import ConcurrencyConstraint, DelayConstraint, MinSinceLastRunConstraint
from sluice.domain.schedules import Schedule, schedule_id_for
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
from sluice.ids import derived_id

T0 = datetime(2026, 3, 28, 20, 0, tzinfo=timezone.utc)  # the night Europe/Berlin springs forward
NS = "crash"
REGIONS = ("eu", "us", "apac")
DATASETS = ("clicks", "clicks", "clicks", "sales", "chunks", "chunks", "logs", "left", "right")


@dataclass(frozen=True)
class Workload:
    deployments: tuple[tuple[datetime, DeployApp], ...]
    notifications: tuple[Notification, ...]
    ends_at: datetime

    @property
    def schedules(self) -> int:
        return len({s.id for _, d in self.deployments for s in d.schedules})


def app_schedules(app: str, variant: int = 0) -> tuple[Schedule, ...]:
    def program(name: str) -> ProgramRef:
        return ProgramRef(NS, app, name)

    def schedule(name: str, prog: str, trigger, **options) -> Schedule:
        ref = program(prog)
        return Schedule(schedule_id_for(ref, name), name, ref, trigger, {"app": app, "variant": str(variant)},
                        enabled=True, **options)

    return (
        schedule("half-hourly-berlin", "report", TimeTrigger("*/30 * * * *", "Europe/Berlin")),
        schedule("three-hourly-ny", "daily", TimeTrigger("0 */3 * * *", "America/New_York"),
                 constraints=(ConcurrencyConstraint(1),)),
        schedule("eu-clicks", "eu_agg", PartitionTrigger(NS, "clicks", 3, {"region": ("eu",)}),
                 constraints=(DelayConstraint(120),)),
        schedule("all-clicks", "clicks_agg", PartitionTrigger(NS, "clicks", 10 + variant),
                 constraints=(ConcurrencyConstraint(1),)),
        schedule("sales-volume", "sales_agg", DataSizeTrigger(NS, "sales", 40_000)),
        schedule("after-eu", "eu_rollup", ProgramStatusTrigger(NS, app, "eu_agg", ("COMPLETED",), 2)),
        schedule("on-clicks-failure", "alert", ProgramStatusTrigger(NS, app, "clicks_agg", ("FAILED",), 1)),
        schedule("chunks-settled", "merge", QuietPeriodTrigger(NS, "chunks", 600, {"region": ("eu", "us")})),
        schedule("logs-or-hourly", "logs_agg", OrTrigger((PartitionTrigger(NS, "logs", 15), ElapsedTrigger(3600))),
                 constraints=(MinSinceLastRunConstraint(600),)),
        schedule("left-and-right", "join", AndTrigger((PartitionTrigger(NS, "left", 2), PartitionTrigger(NS, "right")))),
        # every click, runs 15 minutes apart: later clicks join the job waiting for the interval
        schedule("spaced-clicks", "clicks_spaced", PartitionTrigger(NS, "clicks"),
                 constraints=(MinSinceLastRunConstraint(900),)),
    )


PROGRAMS = ("report", "daily", "eu_agg", "clicks_agg", "sales_agg", "eu_rollup", "alert", "merge", "logs_agg", "join",
            "clicks_spaced")


def build(seed: int, notifications: int, hours: int, apps: int = 2) -> Workload:
    rng = random.Random(seed)
    names = [f"app{i}" for i in range(1, apps + 1)]
    deployments = [(T0, DeployApp(NS, name, tuple(ProgramSpec(p) for p in PROGRAMS), app_schedules(name)))
                   for name in names]
    middle = T0 + timedelta(hours=hours / 2, seconds=17)  # alone in its instant: see docs/decisions.md
    deployments.append((middle, DeployApp(NS, names[0], tuple(ProgramSpec(p) for p in PROGRAMS),
                                          app_schedules(names[0], variant=1))))
    made: list[Notification] = []
    while len(made) < notifications:
        at = T0 + timedelta(seconds=rng.randrange(60, hours * 3600))
        dataset = rng.choice(DATASETS)
        burst = rng.randint(3, 8) if dataset == "chunks" else 1
        for offset in range(min(burst, notifications - len(made))):
            made.append(_partition(seed, len(made), at + timedelta(seconds=45 * offset), dataset, rng))
    made.sort(key=lambda n: (n.time, n.id))
    return Workload(tuple(deployments), tuple(made), T0 + timedelta(hours=hours + 2))


def _partition(seed: int, index: int, at: datetime, dataset: str, rng: random.Random) -> Notification:
    key = {"region": rng.choice(REGIONS), "minute": at.strftime("%H%M%S"), "n": str(index)}
    size = rng.randrange(1_000, 20_000) if dataset == "sales" else rng.randrange(0, 5_000)
    ref = PartitionRef(key, f"/data/{NS}/{dataset}/{index}", size)
    return Notification(derived_id("crash-workload", str(seed), str(index)), at,
                        PartitionCommitted(NS, dataset, (ref,)))

