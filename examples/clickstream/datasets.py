"""The clickstream app's datasets and its daily schedules, as the requests a client sends.

    datasets_requests(data_dir)    # CreateDatasetRequest for clickstream, hourly and daily metrics
    daily_schedules()              # one Schedule per marketplace: OR(24 hourly partitions, 02:00 local)

Every marketplace is partitioned by its own local date and hour, so its day ends at its own
midnight: the daily schedule's time trigger is 02:00 in the marketplace's zone (two hours of grace
for late hours). The partition trigger counts 24 new hourly-metrics partitions of that marketplace;
when the 02:00 fire came first, the count runs across the day boundary, which is harmless: each run
recomputes every day its new partitions touch, from all of that day's partitions.
"""
from __future__ import annotations

from pathlib import Path

from sluice.v1 import datasets_pb2 as dpb
from sluice.v1 import notifications_pb2, schedules_pb2
from sluice_examples.clickstream import app
from sluice_examples.clickstream.generate import MARKETPLACES

DAILY_PROGRAM = "daily_metrics"
DAILY_ENTRY_POINT = str(Path(__file__).resolve().with_name("daily_metrics.py"))
HOURLY_DATASET = app.OUTPUT_DATASET
DAILY_DATASET = "clickstream_daily_metrics"
LINEAGE_JOB_PROPERTY = "sluice.lineage.job"
DAILY_LINEAGE_JOB = "daily_metrics_on_day_end"
"""The marketplaces' daily schedules are one job graph in lineage, their runs told apart by partitions."""
DAY_END_GRACE_CRON = "0 2 * * *"

_HOURLY_KEYS = (("marketplace", dpb.KEY_TYPE_STRING), ("date", dpb.KEY_TYPE_DATE), ("hour", dpb.KEY_TYPE_INT))
_DAILY_KEYS = (("marketplace", dpb.KEY_TYPE_STRING), ("date", dpb.KEY_TYPE_DATE))


def datasets_requests(data_dir: Path) -> list[dpb.CreateDatasetRequest]:
    def dataset(name: str, keys, description: str) -> dpb.CreateDatasetRequest:
        return dpb.CreateDatasetRequest(dataset=dpb.Dataset(
            namespace=app.NAMESPACE, name=name, base_location=str(Path(data_dir).resolve() / app.NAMESPACE / name),
            partition_keys=[dpb.PartitionKey(name=k, type=t) for k, t in keys], description=description))

    return [dataset(app.INPUT_DATASET, _HOURLY_KEYS, "raw clickstream events, one partition per local hour"),
            dataset(HOURLY_DATASET, _HOURLY_KEYS, "experiment metrics per marketplace and local hour"),
            dataset(DAILY_DATASET, _DAILY_KEYS, "experiment metrics per marketplace and local day")]


def daily_schedule(marketplace: str, zone: str) -> schedules_pb2.Schedule:
    hours = schedules_pb2.Trigger(partition=schedules_pb2.PartitionTrigger(
        namespace=app.NAMESPACE, dataset=HOURLY_DATASET, count=24,
        filter={"marketplace": schedules_pb2.AllowedValues(values=[marketplace])}))
    grace = schedules_pb2.Trigger(time=schedules_pb2.TimeTrigger(cron=DAY_END_GRACE_CRON, zone=zone))
    return schedules_pb2.Schedule(
        name=f"daily_metrics_{marketplace.lower()}",
        program=notifications_pb2.ProgramRef(namespace=app.NAMESPACE, app=app.APP, program=DAILY_PROGRAM),
        trigger=schedules_pb2.Trigger(**{"or": schedules_pb2.OrTrigger(any_of=[hours, grace])}),
        properties={"marketplace": marketplace, LINEAGE_JOB_PROPERTY: DAILY_LINEAGE_JOB}, enabled=True,
        description=f"{marketplace}'s local day once its 24 hours exist, or at 02:00 {zone} with what exists")


def daily_schedules() -> list[schedules_pb2.Schedule]:
    return [daily_schedule(marketplace, zone) for marketplace, zone in MARKETPLACES.items()]
