"""`make demo-cluster`: the clickstream example of `make demo` in distributed mode.

Every service is its own process (`sluice serve NAME`) over a Kafka broker and a PostgreSQL event log,
and the programs run on a Spark standalone cluster -- one master and two workers, each a JVM from
pyspark's own jars (deploy/spark/cluster.sh) -- their drivers beside the launcher in client mode.
It deploys the same app, adds the same clickstream hours and prints the same tables as `make demo`,
the runs with the Spark application each ran as. Everything it starts listens on 127.0.0.1 (free
ports) and is stopped by pid at the end; the broker, the database and the cluster are thrown away."""
from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import time
from pathlib import Path

import grpc
from psycopg.conninfo import conninfo_to_dict

from sluice.cli import render
from sluice.client import SluiceClient
from sluice.eventlog.postgres import PostgresEventLog
from sluice.v1 import datasets_pb2, datasets_pb2_grpc, notifications_pb2
from sluice_examples.clickstream import app, report
from sluice_examples.clickstream import datasets as clickstream_datasets
from sluice_examples.clickstream.demo import (
    consumed_by_run,
    deploy_request,
    input_records,
    publish_hours,
    show_output_rows,
    wait_for_runs,
)
from sluice_services.catalogue import NAMES as SERVICES
from sluice_services.localserver import LocalServer
from sluice_services.streams import schedule_recorded
from tests.support.kafka import KafkaBroker
from tests.support.postgres import PostgresServer
from tests.support.spark_cluster import SparkCluster

SPARK_ON_THE_CLUSTER = ("--spark-conf", "spark.cores.max=1", "--spark-executor-memory", "512m",
                        "--spark-conf", "spark.ui.enabled=true", "--spark-conf", "spark.ui.port=0")
"""One core per application, so that two runs share the two workers; each driver with its UI."""


def start_services(stack: contextlib.ExitStack, data_dir: Path, common: list[str],
                   launcher: list[str]) -> dict[str, LocalServer]:
    """Every service its own process, in the catalogue's order; the launcher told where the datasets service is."""
    servers: dict[str, LocalServer] = {}
    for name in SERVICES:
        extra = []
        if name == "launcher":
            extra = [*launcher, *(("--datasets-address", servers["datasets"].address) if "datasets" in servers else ())]
        servers[name] = stack.enter_context(LocalServer(data_dir, command=("serve", name), args=[*common, *extra]))
    return servers


def wait_until_matched_by_the_matcher(dsn: str, schedule_ids: list[str], timeout: float = 120) -> None:
    """The schedules reach the matcher over Kafka; a partition added before that would find none."""
    log = PostgresEventLog(dsn)
    deadline = time.monotonic() + timeout
    try:
        while not all(schedule_recorded(log, schedule_id) for schedule_id in schedule_ids):
            if time.monotonic() > deadline:
                raise SystemExit(f"the matcher did not see the schedules within {timeout:.0f}s")
            time.sleep(0.5)
    finally:
        log.close()


def postgres_url(dsn: str) -> str:
    parts = conninfo_to_dict(dsn)
    return f"postgresql://{parts['user']}@{parts['host']}:{parts['port']}/{parts['dbname']}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path(".sluice/demo-cluster"))
    parser.add_argument("--date", default="2026-11-22", help="local date of the generated hours")
    parser.add_argument("--hours", default="9,10", help="local hours to generate in every marketplace")
    parser.add_argument("--rows", type=int, default=2000, help="events per partition")
    parser.add_argument("--timeout", type=float, default=1200)
    args = parser.parse_args(argv)
    hours = [int(h) for h in args.hours.split(",")]
    data_dir = args.data_dir.resolve()

    shutil.rmtree(data_dir, ignore_errors=True)
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(SparkCluster(data_dir / "spark"))
        pids = cluster.pids()
        print(f"== Spark standalone master at {cluster.master_url} (pid {pids['master']}), UI {cluster.master_webui}; "
              f"workers: {', '.join(f'{name} (pid {pid})' for name, pid in pids.items() if name != 'master')}")
        kafka = stack.enter_context(KafkaBroker())
        postgres = stack.enter_context(PostgresServer())
        dsn = postgres.create_database()
        event_log = postgres_url(dsn)
        print(f"== Kafka at {kafka.bootstrap} (pid {kafka.pid}), PostgreSQL event log {event_log}")
        servers = start_services(stack, data_dir, ["--event-log", event_log, "--bus", f"kafka://{kafka.bootstrap}"],
                                 ["--spark-master", cluster.master_url, "--max-parallel-runs", "2",
                                  *SPARK_ON_THE_CLUSTER])
        print(render.table(("SERVICE", "ADDRESS", "PID"), [(name, s.address, s.pid) for name, s in servers.items()]))
        clients = {name: stack.enter_context(SluiceClient(server.address)) for name, server in servers.items()}
        for client in clients.values():
            client.wait_ready()
        datasets_address = servers["datasets" if "datasets" in servers else "launcher"].address
        partitions = datasets_pb2_grpc.PartitionsStub(stack.enter_context(grpc.insecure_channel(datasets_address)))
        for request in clickstream_datasets.datasets_requests(data_dir / "data"):
            partitions.CreateDataset(request, timeout=30)
        print("\n== Datasets registered")
        print(render.table(("DATASET", "PARTITION KEYS", "LOCATION"),
                           [(d.name, " ".join(k.name for k in d.partition_keys), os.path.relpath(d.base_location))
                            for d in partitions.ListDatasets(datasets_pb2.ListDatasetsRequest(
                                namespace=app.NAMESPACE), timeout=30).datasets]))
        registry = clients["registry"]
        deployed = registry.schedules.DeployApp(deploy_request(), timeout=30)
        print(f"\n== App {app.NAMESPACE}.{app.APP} deployed: {len(deployed.created)} schedule(s) created")
        schedules = registry.list_schedules(app.NAMESPACE)
        print("\n== Schedules registered")
        print(render.table(("NAME", "PROGRAM", "DESCRIPTION", "ENABLED", "PROPERTIES"),
                           [(s.name, f"{s.program.app}.{s.program.program}", s.description, s.enabled,
                             render.pairs(s.properties)) for s in schedules]))
        wait_until_matched_by_the_matcher(dsn, [s.id for s in schedules])

        published = publish_hours(partitions, data_dir / "data", args.date, hours, args.rows)
        print("\n== Partitions added (one transaction each)")
        print(render.table(("DATASET", "PARTITION", "RECORDS", "BYTES"),
                           [(app.INPUT_DATASET, render.pairs(p["key"]), p["record_count"], p["size_bytes"])
                            for p in published]))

        print(f"\n== Waiting for the runs (spark-submit to {cluster.master_url}, client mode)")
        hourly_schedule = next(s.id for s in schedules if s.name == app.HOURLY_METRICS_ON_ARRIVAL.name)
        runs = wait_for_runs(clients["checker"], hourly_schedule, len(published), args.timeout,
                             runs_client=clients["launcher"])
        names = {s.id: s.name for s in schedules}
        jobs = clients["checker"].list_jobs()
        report.print_jobs(jobs, names)
        hourly = partitions.ListPartitions(datasets_pb2.ListPartitionsRequest(
            namespace=app.NAMESPACE, dataset=clickstream_datasets.HOURLY_DATASET), timeout=30).partitions
        print(f"\n== {clickstream_datasets.HOURLY_DATASET}: {len(hourly)} partition(s) published by commit sequences")
        lines = report.run_lines(runs, {j.id: j for j in jobs}, consumed_by_run(partitions), input_records(partitions))
        print(f"\n== Runs of {app.HOURLY_METRICS.program}, each a Spark application on the standalone cluster "
              f"(partitions as marketplace/date/hour: those its trigger brought, those it took from its partition "
              f"consumer; rows read and written)")
        print(render.table((*report.HEADER, "SPARK APPLICATION", "DRIVER UI"),
                           [(*line.row(), r.spark_application_id or "-", r.spark_ui_url or "-")
                            for line, r in zip(lines, runs)]))
        for run in runs:
            if run.error:
                print(f"  {run.id[:8]}: {run.error[:200]}")
        print("\n== Lineage")
        print(render.lineage_tree(clients["lineage"].lineage_jobs(), clients["lineage"].lineage_runs()))
        failed = [r for r in runs if r.status != notifications_pb2.COMPLETED]
    print("\n== Rows produced (dataset clickstream_hourly_metrics, read back with Spark)")
    show_output_rows(runs)
    print(f"\n== Done in {time.monotonic() - started:.0f}s: {len(runs) - len(failed)} runs completed, {len(failed)} failed"
          f" on the cluster; every process started here stopped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
