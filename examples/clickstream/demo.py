"""`make demo`: the clickstream example end to end in embedded mode.

Starts `sluice standalone` (one process: SQLite event log, in-process bus, local Spark), registers
the app's datasets (clickstream, hourly and daily metrics) and deploys the app over gRPC: hourly
metrics on every new clickstream partition, one run at a time, and a daily aggregate per
marketplace once its 24 hours exist or at 02:00 local time. It adds clickstream partitions for US,
UK and JP (each hour in its own time zone) in dataset transactions, waits for the PySpark runs --
the first takes the first partition; the partitions committed while it runs join the next run's
job, and that run takes them all from its partition consumer, then publishes its output through a
commit sequence -- and prints what happened: each run with the partitions its trigger brought and
those it really consumed, and the daily jobs still waiting."""
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
import grpc

from sluice_services.localserver import LocalServer
from sluice.v1 import datasets_pb2, datasets_pb2_grpc, jobs_pb2, notifications_pb2, schedules_pb2
from sluice_examples.clickstream import app, report
from sluice_examples.clickstream import datasets as clickstream_datasets
from sluice_examples.clickstream.generate import MARKETPLACES, generate_hour

TERMINAL = {notifications_pb2.COMPLETED, notifications_pb2.FAILED, notifications_pb2.KILLED, notifications_pb2.LOST}


def publish_hours(partitions: datasets_pb2_grpc.PartitionsStub, data_dir: Path, local_date: str, hours: list[int],
                  rows: int) -> list[dict]:
    """Each generated hour is one dataset transaction; its commit publishes the partition notification."""
    published = []
    for hour in hours:
        for index, (marketplace, zone) in enumerate(MARKETPLACES.items()):
            local_hour = datetime.fromisoformat(f"{local_date}T{hour:02d}:00").replace(tzinfo=ZoneInfo(zone))
            partition = generate_hour(data_dir, app.NAMESPACE, marketplace, local_hour, rows, seed=hour * 10 + index)
            ref = notifications_pb2.PartitionRef(
                key=[notifications_pb2.KeyValue(name=k, value=v) for k, v in partition["key"].items()],
                location=partition["location"], size_bytes=partition["size_bytes"],
                record_count=partition["record_count"], metadata=partition.get("metadata", {}))
            partitions.AddPartitions(datasets_pb2.AddPartitionsRequest(
                namespace=app.NAMESPACE, dataset=app.INPUT_DATASET, partitions=[ref], owner="demo"), timeout=30)
            published.append(partition)
    return published


FINISHED_JOBS = {jobs_pb2.LAUNCHED, jobs_pb2.JOINED, jobs_pb2.DISCARDED}


def wait_for_runs(client: SluiceClient, schedule_id: str, fired: int, timeout: float,
                  runs_client: SluiceClient | None = None) -> list:
    """Until the schedule's `fired` jobs are finished (launched, or joined to another) and their runs
    ended. `client` serves the jobs, `runs_client` (default: the same) the runs."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        jobs = client.list_jobs(schedule_id)
        runs = (runs_client or client).list_runs(schedule_id)
        joined = sum(j.state == jobs_pb2.JOINED for j in jobs)
        done = [r for r in runs if r.status in TERMINAL]
        status = f"  jobs: {len(jobs)} of {fired}, {joined} joined a waiting job; runs: {len(runs)} requested, " \
                 f"{len(done)} finished"
        if status != last:
            print(status, flush=True)
            last = status
        launched = sum(j.state == jobs_pb2.LAUNCHED for j in jobs)
        if len(jobs) >= fired and all(j.state in FINISHED_JOBS for j in jobs) and len(done) == len(runs) == launched:
            return runs
        time.sleep(1)
    raise SystemExit(f"timed out after {timeout:.0f}s waiting for the runs of {fired} jobs")


def consumed_by_run(partitions: datasets_pb2_grpc.PartitionsStub) -> dict[str, list[dict[str, str]]]:
    state = partitions.GetConsumer(datasets_pb2.GetConsumerRequest(
        namespace=app.NAMESPACE, dataset=app.INPUT_DATASET, consumer=report.HOURLY_CONSUMER), timeout=30)
    return report.consumed_by_run(state.json)


def input_records(partitions: datasets_pb2_grpc.PartitionsStub) -> dict[tuple[str, ...], int]:
    listed = partitions.ListPartitions(datasets_pb2.ListPartitionsRequest(
        namespace=app.NAMESPACE, dataset=app.INPUT_DATASET), timeout=30).partitions
    return {tuple(kv.value for kv in p.partition.key): p.partition.record_count for p in listed}


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
    programs = [schedules_pb2.ProgramSpec(name=p.program, entry_point=p.entry_point, description=p.description)
                for p in app.programs()]
    programs.append(schedules_pb2.ProgramSpec(name=clickstream_datasets.DAILY_PROGRAM,
                                              entry_point=clickstream_datasets.DAILY_ENTRY_POINT,
                                              description="Per marketplace metrics of one local day"))
    return schedules_pb2.DeployAppRequest(
        namespace=app.NAMESPACE, app=app.APP, programs=programs,
        schedules=[schedule_proto(spec) for spec in app.schedules()] + clickstream_datasets.daily_schedules())


def schedule_proto(spec: app.ScheduleSpec) -> schedules_pb2.Schedule:
    trigger = schedules_pb2.PartitionTrigger(namespace=spec.trigger.namespace, dataset=spec.trigger.dataset,
                                             count=spec.trigger.count)
    constraints = [schedules_pb2.Constraint(concurrency=schedules_pb2.ConcurrencyConstraint(
        max_running=spec.max_concurrent))] if spec.max_concurrent else []
    return schedules_pb2.Schedule(
        name=spec.name, program=notifications_pb2.ProgramRef(namespace=spec.namespace, app=spec.app, program=spec.program),
        trigger=schedules_pb2.Trigger(partition=trigger), properties=spec.properties, enabled=spec.enabled,
        description=spec.description, constraints=constraints)


def _fmt(value: object) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path(".sluice/demo"))
    parser.add_argument("--date", default="2026-11-22", help="local date of the generated hours")
    parser.add_argument("--hours", default="9,10", help="local hours to generate in every marketplace")
    parser.add_argument("--rows", type=int, default=2000, help="events per partition")
    parser.add_argument("--timeout", type=float, default=900,
                        help="seconds to wait for the runs (a loaded machine starts Spark slowly)")
    args = parser.parse_args(argv)
    hours = [int(h) for h in args.hours.split(",")]

    shutil.rmtree(args.data_dir, ignore_errors=True)
    started = time.monotonic()
    server = LocalServer(args.data_dir, args=["--max-parallel-runs", "2"]).start()
    print(f"== sluice standalone on {server.address}, data in {args.data_dir} (pid {server.pid})")
    try:
        with SluiceClient(server.address) as client:
            client.wait_ready()
            partitions = datasets_pb2_grpc.PartitionsStub(grpc.insecure_channel(server.address))
            for request in clickstream_datasets.datasets_requests(args.data_dir / "data"):
                partitions.CreateDataset(request, timeout=30)
            print("\n== Datasets registered")
            print(render.table(("DATASET", "PARTITION KEYS", "LOCATION"),
                               [(d.name, " ".join(k.name for k in d.partition_keys), os.path.relpath(d.base_location))
                                for d in partitions.ListDatasets(datasets_pb2.ListDatasetsRequest(
                                    namespace=app.NAMESPACE), timeout=30).datasets]))
            deployed = client.schedules.DeployApp(deploy_request(), timeout=30)
            print(f"\n== App {app.NAMESPACE}.{app.APP} deployed: {len(deployed.created)} schedule(s) created")
            schedules = client.list_schedules(app.NAMESPACE)
            print("\n== Schedules registered")
            print(render.table(("NAME", "PROGRAM", "DESCRIPTION", "ENABLED", "PROPERTIES"),
                               [(s.name, f"{s.program.app}.{s.program.program}", s.description, s.enabled,
                                 render.pairs(s.properties)) for s in schedules]))

            published = publish_hours(partitions, args.data_dir / "data", args.date, hours, args.rows)
            print("\n== Partitions added (one transaction each)")
            print(render.table(("DATASET", "PARTITION", "RECORDS", "BYTES"),
                               [(app.INPUT_DATASET, render.pairs(p["key"]), p["record_count"], p["size_bytes"])
                                for p in published]))

            print("\n== Waiting for the runs (spark-submit, local mode)")
            hourly_schedule = next(s.id for s in schedules if s.name == app.HOURLY_METRICS_ON_ARRIVAL.name)
            runs = wait_for_runs(client, hourly_schedule, len(published), args.timeout)

            names = {s.id: s.name for s in schedules}
            jobs = client.list_jobs()
            report.print_jobs(jobs, names)
            hourly = partitions.ListPartitions(datasets_pb2.ListPartitionsRequest(
                namespace=app.NAMESPACE, dataset=clickstream_datasets.HOURLY_DATASET), timeout=30).partitions
            print(f"\n== {clickstream_datasets.HOURLY_DATASET}: {len(hourly)} partition(s) published by commit sequences")
            lines = report.run_lines(runs, {j.id: j for j in jobs}, consumed_by_run(partitions),
                                     input_records(partitions))
            print(f"\n== Runs of {app.HOURLY_METRICS.program} (partitions as marketplace/date/hour: those its "
                  f"trigger brought, those it took from its partition consumer; rows read and written)")
            print(render.table(report.HEADER, [line.row() for line in lines]))
            for run in runs:
                if run.error:
                    print(f"  {run.id[:8]}: {run.error[:200]}")
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
