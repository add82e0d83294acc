"""Hourly experiment metrics from clickstream partitions: the PySpark program Sluice launches.

    spark-submit --master local[1] .../hourly_metrics.py --sluice-context /abs/context.json

Reads new clickstream partitions from its partition consumer (when the dataset is registered; else
exactly the partitions of the notifications that triggered the run) and writes, for each of them,
one partition of `clickstream_hourly_metrics` with the same key (marketplace, date, hour): one
row per (experiment_id, bucket) with

    events, users, sessions (distinct), views, clicks, add_to_carts, purchases, converted_sessions,
    click_through_rate = clicks / views             (null without views)
    conversion_rate    = converted_sessions (sessions with a purchase) / sessions
    revenue            = sum of purchase revenue, in the marketplace's currency (column currency)
    p50_latency_ms, p95_latency_ms                  (percentile_approx)

The key columns are kept in the files too, so a single partition is self-describing.
Run as a plain script path: only `sluice.sdk` and pyspark are imported.
"""
from __future__ import annotations

import functools

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from sluice.sdk import SparkProgram, run

INPUT_DATASET = "clickstream"
OUTPUT_DATASET = "clickstream_hourly_metrics"
KEY_COLUMNS = ("marketplace", "date", "hour")
GROUP_COLUMNS = (*KEY_COLUMNS, "experiment_id", "bucket", "currency")
SPARK_DEFAULTS = {"spark.sql.shuffle.partitions": "4"}   # only when spark-submit did not set it

_STRING_FIELDS = ("event_time", "user_id", "session_id", "page", "event_type", "experiment_id", "bucket")
EVENT_SCHEMA = StructType(
    [StructField(name, StringType()) for name in _STRING_FIELDS]
    + [StructField("latency_ms", LongType()), StructField("revenue", DoubleType()),
       StructField("marketplace", StringType()), StructField("currency", StringType())]
)


def hourly_metrics(events: DataFrame) -> DataFrame:
    """Per (marketplace, date, hour, experiment_id, bucket, currency) metrics of clickstream events."""
    def of_type(event_type: str):
        return F.col("event_type") == event_type

    def count_of(event_type: str):
        return F.count(F.when(of_type(event_type), True))

    counted = events.groupBy(*GROUP_COLUMNS).agg(
        F.count(F.lit(1)).alias("events"),
        F.countDistinct("user_id").alias("users"),
        F.countDistinct("session_id").alias("sessions"),
        count_of("view").alias("views"),
        count_of("click").alias("clicks"),
        count_of("add_to_cart").alias("add_to_carts"),
        count_of("purchase").alias("purchases"),
        F.countDistinct(F.when(of_type("purchase"), F.col("session_id"))).alias("converted_sessions"),
        F.coalesce(F.sum(F.when(of_type("purchase"), F.col("revenue"))), F.lit(0.0)).alias("revenue"),
        F.percentile_approx("latency_ms", 0.5).alias("p50_latency_ms"),
        F.percentile_approx("latency_ms", 0.95).alias("p95_latency_ms"),
    )
    return counted.select(
        *GROUP_COLUMNS, "events", "users", "sessions", "views", "clicks", "add_to_carts", "purchases",
        "converted_sessions",
        F.when(F.col("views") > 0, F.col("clicks") / F.col("views")).alias("click_through_rate"),
        F.when(F.col("sessions") > 0, F.col("converted_sessions") / F.col("sessions")).alias("conversion_rate"),
        F.round("revenue", 2).alias("revenue"),
        "p50_latency_ms", "p95_latency_ms",
    )


def main(program: SparkProgram) -> dict:
    if program.has_dataset(INPUT_DATASET):   # a registered dataset: the new partitions of its consumer
        events = program.consume(INPUT_DATASET, limit=take_limit(program), format="json", schema=EVENT_SCHEMA)
        partitions = program.consumed(INPUT_DATASET)
    else:                                  # the partitions of the notifications that triggered the run
        partitions = program.context.partitions(INPUT_DATASET)
        events = program.read_partitions(INPUT_DATASET, format="json", schema=EVENT_SCHEMA)
    if not partitions:
        print("hourly_metrics: no new partitions", flush=True)
        return {"input_partitions": 0, "input_events": 0}
    metrics = hourly_metrics(events).cache()
    for part in partitions:
        in_partition = functools.reduce(lambda a, b: a & b, [F.col(k) == v for k, v in part.key.items()])
        rows = metrics.where(in_partition).orderBy("experiment_id", "bucket")
        program.write_output(rows, part.namespace, OUTPUT_DATASET, dict(part.key))

    rows = metrics.collect()   # a handful of rows per partition
    focus = program.context.properties.get("experiment")
    print(f"hourly_metrics: {len(partitions)} partition(s), {sum(r.events for r in rows)} events, "
          f"{sum(r.purchases for r in rows)} purchases -> {len(rows)} metric rows"
          + (f"; {focus}: {_conversion_by_bucket(rows, focus)}" if focus else ""), flush=True)
    return {"input_partitions": len(partitions), "input_events": sum(r.events for r in rows)}


def take_limit(program: SparkProgram) -> int:
    """As many partitions as triggered the run (its notifications, those of the jobs that joined its
    job included): the consumer hands out the oldest first, which are the run's own, and leaves the
    rest to the runs they trigger. A run no partition triggered takes up to the `limit` property (24)."""
    triggered = len(program.context.partitions(INPUT_DATASET))
    return triggered or int(program.context.properties.get("limit", "24"))


def _conversion_by_bucket(rows: list, experiment: str) -> str:
    sessions: dict[str, list[int]] = {}
    for r in rows:
        if r.experiment_id == experiment:
            total = sessions.setdefault(r.bucket, [0, 0])
            total[0] += r.sessions
            total[1] += r.converted_sessions
    if not sessions:
        return "no events"
    return ", ".join(f"{b} converts {c / s:.1%} of {s} sessions" for b, (s, c) in sorted(sessions.items()))


if __name__ == "__main__":
    run(main, defaults=SPARK_DEFAULTS)
