"""`make demo`: the clickstream example end to end in embedded mode.

Starts `sluice standalone` (one process: SQLite event log, in-process bus, local Spark), registers
the hourly-metrics schedule over gRPC, publishes clickstream partitions for US, UK and JP (each
hour in its own time zone), waits for the PySpark runs and prints what happened."""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

from sluice.cli import render
from sluice.client import SluiceClient
from sluice.domain.common import PartitionRef
from sluice.localserver import LocalServer
from sluice.v1 import jobs_pb2, notifications_pb2, schedules_pb2
from sluice_examples.clickstream import app
from sluice_examples.clickstream.generate import MARKETPLACES, generate_hour

TERMINAL = {notifications_pb2.COMPLETED, notifications_pb2.FAILED, notifications_pb2.KILLED, notifications_pb2.LOST}


def publish_hours(client: SluiceClient, data_dir: Path, local_date: str, hours: list[int], rows: int) -> list[dict]:
    published = []
    for hour in hours:
        for index, (marketplace, zone) in enumerate(MARKETPLACES.items()):
            local_hour = datetime.fromisoformat(f"{local_date}T{hour:02d}:00").replace(tzinfo=ZoneInfo(zone))
            partition = generate_hour(data_dir, app.NAMESPACE, marketplace, local_hour, rows, seed=hour * 10 + index)
            ref = PartitionRef(partition["key"], partition["location"], partition["size_bytes"],
                               partition["record_count"], partition.get("metadata", {}))
            client.publish_partitions(app.NAMESPACE, app.INPUT_DATASET, [ref])
            published.append(partition)
    return published


def wait_for_runs(client: SluiceClient, expected: int, timeout: float) -> list:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        runs = client.list_runs()
        done = [r for r in runs if r.status in TERMINAL]
        status = f"  runs: {len(runs)} requested, {len(done)} finished of {expected}"
        if status != last:
            print(status, flush=True)
            last = status
        if len(done) >= expected:
            return runs
        time.sleep(1)
    raise SystemExit(f"timed out after {timeout:.0f}s waiting for {expected} runs")


def show_output_rows(runs: list) -> None:
    from pyspark.sql import SparkSession

    locations = [o.partition.location for r in runs for o in r.outputs]
    if not locations:
        print("no output partitions")
        return
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (SparkSession.builder.master("local[1]").appName("sluice-demo-report")
             .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        frame = spark.read.parquet(*locations)
        columns = ["marketplace", "date", "hour", "experiment_id", "bucket", "users", "views", "clicks",
                   "purchases", "click_through_rate", "revenue"]
        rows = frame.select(*[c for c in columns if c in frame.columns]).orderBy("marketplace", "hour", "experiment_id",
                                                                                  "bucket").collect()
        print(render.table(columns, [[_fmt(r[c]) for c in columns if c in frame.columns] for r in rows]))
    finally:
        spark.stop()


def deploy_request() -> schedules_pb2.DeployAppRequest:
    return schedules_pb2.DeployAppRequest(
        namespace=app.NAMESPACE, app=app.APP,
        programs=[schedules_pb2.ProgramSpec(name=p.program, entry_point=p.entry_point, description=p.description)
                  for p in app.programs()],
        schedules=[schedule_proto(spec) for spec in app.schedules()])


def schedule_proto(spec: app.ScheduleSpec) -> schedules_pb2.Schedule:
    trigger = schedules_pb2.PartitionTrigger(namespace=spec.trigger.namespace, dataset=spec.trigger.dataset,
                                             count=spec.trigger.count)
    return schedules_pb2.Schedule(
        name=spec.name, program=notifications_pb2.ProgramRef(namespace=spec.namespace, app=spec.app, program=spec.program),
        trigger=schedules_pb2.Trigger(partition=trigger), properties=spec.properties, enabled=spec.enabled,
        description=spec.description)


def _fmt(value: object) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path(".sluice/demo"))
    parser.add_argument("--date", default="2026-11-22", help="local date of the generated hours")
    parser.add_argument("--hours", default="9,10", help="local hours to generate in every marketplace")
    parser.add_argument("--rows", type=int, default=2000, help="events per partition")
    parser.add_argument("--timeout", type=float, default=280)
    args = parser.parse_args(argv)
    hours = [int(h) for h in args.hours.split(",")]

    shutil.rmtree(args.data_dir, ignore_errors=True)
    started = time.monotonic()
    server = LocalServer(args.data_dir, args=["--max-parallel-runs", "2"]).start()
    print(f"== sluice standalone on {server.address}, data in {args.data_dir} (pid {server.pid})")
    try:
        with SluiceClient(server.address) as client:
            client.wait_ready()
            deployed = client.schedules.DeployApp(deploy_request(), timeout=30)
            print(f"\n== App {app.NAMESPACE}.{app.APP} deployed: {len(deployed.created)} schedule(s) created")
            schedules = client.list_schedules(app.NAMESPACE)
            print("\n== Schedules registered")
            print(render.table(("NAME", "PROGRAM", "TRIGGER", "ENABLED", "PROPERTIES"),
                               [(s.name, f"{s.program.app}.{s.program.program}",
                                 f"{s.trigger.partition.count} new partition(s) of {s.trigger.partition.namespace}."
                                 f"{s.trigger.partition.dataset}", s.enabled, render.pairs(s.properties))
                                for s in schedules]))

            published = publish_hours(client, args.data_dir / "data", args.date, hours, args.rows)
            print("\n== Partitions published")
            print(render.table(("DATASET", "PARTITION", "RECORDS", "BYTES"),
                               [(app.INPUT_DATASET, render.pairs(p["key"]), p["record_count"], p["size_bytes"])
                                for p in published]))

            print("\n== Waiting for the runs (spark-submit, local mode)")
            runs = wait_for_runs(client, len(published), args.timeout)

            print("\n== Jobs")
            print(render.table(("JOB", "STATE", "CREATED", "UPDATED"),
                               [(j.id[:8], jobs_pb2.JobState.Name(j.state), render.when(j.created_at),
                                 render.when(j.updated_at)) for j in client.list_jobs()]))
            print("\n== Runs")
            print(render.table(("RUN", "PROGRAM", "INPUT", "STATUS", "DURATION", "ROWS OUT", "OUTPUT"),
                               [(r.id[:8], f"{r.program.app}.{r.program.program}",
                                 " ".join(render.key_text(i.key) for i in r.inputs),
                                 notifications_pb2.RunStatus.Name(r.status), render.duration(r.started_at, r.ended_at),
                                 sum(o.partition.record_count for o in r.outputs),
                                 " ".join(os.path.relpath(o.partition.location) for o in r.outputs) or r.error[:80])
                                for r in runs]))
            print("\n== Lineage")
            print(render.lineage_tree(client.lineage_jobs(), client.lineage_runs()))
            failed = [r for r in runs if r.status != notifications_pb2.COMPLETED]
    finally:
        server.stop()
    print("\n== Rows produced (dataset clickstream_hourly_metrics, read back with Spark)")
    show_output_rows(runs)
    print(f"\n== Done in {time.monotonic() - started:.0f}s: {len(runs) - len(failed)} runs completed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
