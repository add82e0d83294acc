"""The clickstream app, as data: one program and the schedule that runs it on every new partition,
one run at a time: partitions that arrive while a run goes join the next run's job (Sluice's
default for a waiting job), so that run takes all of them from its partition consumer.

Plain dataclasses (and `as_dict()` for JSON-friendly dicts); turning them into gRPC requests is
the registry client's job.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

NAMESPACE = "experiments"
APP = "clickstream"
INPUT_DATASET = "clickstream"
OUTPUT_DATASET = "clickstream_hourly_metrics"
HOURLY_METRICS_ENTRY_POINT = str(Path(__file__).resolve().with_name("hourly_metrics.py"))


@dataclass(frozen=True)
class ProgramSpec:
    namespace: str
    app: str
    program: str
    entry_point: str                 # absolute path of the script spark-submit runs
    description: str = ""


@dataclass(frozen=True)
class PartitionTriggerSpec:
    namespace: str
    dataset: str
    count: int                       # partitions to accumulate before one run


@dataclass(frozen=True)
class ScheduleSpec:
    name: str                        # unique within the app
    namespace: str                   # of the program it runs
    app: str
    program: str
    trigger: PartitionTriggerSpec
    properties: dict[str, str] = field(default_factory=dict)   # the program's runtime arguments
    description: str = ""
    enabled: bool = True
    max_concurrent: int = 0          # runs of the program at once (a concurrency constraint); 0: no limit


@dataclass(frozen=True)
class AppSpec:
    namespace: str
    app: str
    programs: tuple[ProgramSpec, ...]
    schedules: tuple[ScheduleSpec, ...]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


HOURLY_METRICS = ProgramSpec(
    namespace=NAMESPACE, app=APP, program="hourly_metrics",
    entry_point=HOURLY_METRICS_ENTRY_POINT,
    description=f"Per experiment bucket metrics of one clickstream hour, written to {OUTPUT_DATASET}.",
)

HOURLY_METRICS_ON_ARRIVAL = ScheduleSpec(
    name="hourly_metrics_on_arrival",
    namespace=NAMESPACE, app=APP, program=HOURLY_METRICS.program,
    trigger=PartitionTriggerSpec(namespace=NAMESPACE, dataset=INPUT_DATASET, count=1),
    properties={"experiment": "exp-42"},
    description="Hourly metrics of new clickstream partitions, one run at a time.",
    max_concurrent=1,
)

CLICKSTREAM_APP = AppSpec(
    namespace=NAMESPACE, app=APP,
    programs=(HOURLY_METRICS,),
    schedules=(HOURLY_METRICS_ON_ARRIVAL,),
)


def programs() -> tuple[ProgramSpec, ...]:
    return CLICKSTREAM_APP.programs


def schedules() -> tuple[ScheduleSpec, ...]:
    """The app's schedules as plain specs (a client converts them to schedules_pb2.Schedule)."""
    return CLICKSTREAM_APP.schedules
