"""Daily experiment metrics of one marketplace's local day: the PySpark program Sluice launches.

    spark-submit .../daily_metrics.py --sluice-context /abs/context.json     (property marketplace=US)

Each marketplace has its own schedule (see schedules.py): it runs once the 24 hourly-metrics
partitions of a local day exist, or at 02:00 local time with what exists. The run consumes the new
hourly partitions of its marketplace (its own consumer, daily_<marketplace>), and for every local
date they touch recomputes that day from ALL of its hourly partitions, so an hour arriving late
yields a corrected day, not a partial one. One partition of `clickstream_daily_metrics` per
(marketplace, date), one row per (experiment_id, bucket, currency):

    hours, events, views, clicks, add_to_carts, purchases, sessions, converted_sessions, revenue  (sums)
    click_through_rate = clicks / views, conversion_rate = converted_sessions / sessions
(sessions are summed over hours: a session spanning two hours counts twice.)
"""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sluice.sdk import SparkProgram, run

HOURLY_DATASET = "clickstream_hourly_metrics"
DAILY_DATASET = "clickstream_daily_metrics"
GROUP_COLUMNS = ("marketplace", "date", "experiment_id", "bucket", "currency")
SUMMED = ("events", "views", "clicks", "add_to_carts", "purchases", "sessions", "converted_sessions", "revenue")
SPARK_DEFAULTS = {"spark.sql.shuffle.partitions": "4"}


def daily_metrics(hourly: DataFrame) -> DataFrame:
    """Hourly metric rows of one or more days -> one row per (marketplace, date, experiment, bucket, currency)."""
    totals = hourly.groupBy(*GROUP_COLUMNS).agg(
        F.countDistinct("hour").alias("hours"), *(F.sum(column).alias(column) for column in SUMMED))
    return totals.select(
        *GROUP_COLUMNS, "hours", *SUMMED[:-1], F.round("revenue", 2).alias("revenue"),
        F.when(F.col("views") > 0, F.col("clicks") / F.col("views")).alias("click_through_rate"),
        F.when(F.col("sessions") > 0, F.col("converted_sessions") / F.col("sessions")).alias("conversion_rate"),
    ).orderBy(*GROUP_COLUMNS)


def main(program: SparkProgram) -> dict:
    marketplace = program.context.properties["marketplace"]
    namespace = program.context.program.namespace
    program.consume(HOURLY_DATASET, limit=int(program.context.properties.get("limit", "240")),
                    where={"marketplace": marketplace}, consumer=f"daily_{marketplace}", format="parquet")
    dates = sorted({p.key["date"] for p in program.consumed(HOURLY_DATASET)})
    written = 0
    for date in dates:
        hourly = program.read(HOURLY_DATASET, where={"marketplace": marketplace, "date": date}, format="parquet")
        output = program.write_output(daily_metrics(hourly), namespace, DAILY_DATASET,
                                      {"marketplace": marketplace, "date": date})
        written += output.record_count
    print(f"daily_metrics {marketplace}: {len(program.consumed(HOURLY_DATASET))} new hourly partition(s), "
          f"day(s) {', '.join(dates) or 'none'} -> {written} row(s)", flush=True)
    return {"days": len(dates), "hourly_partitions": len(program.consumed(HOURLY_DATASET))}


if __name__ == "__main__":
    run(main, defaults=SPARK_DEFAULTS)
