"""Distributed mode: the five services as separate OS processes on a real Kafka broker, PostgreSQL
as the event log and real Spark. The clickstream program produces the same rows as in embedded mode."""
from __future__ import annotations

import contextlib
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from psycopg.conninfo import conninfo_to_dict

from sluice.client import SluiceClient
from sluice.domain.common import PartitionRef
from sluice.eventlog.postgres import PostgresEventLog
from sluice_services.localserver import LocalServer
from tests.support.kafka import KafkaBroker
from tests.support.service_processes import start_registry_first
from sluice.v1 import jobs_pb2, notifications_pb2 as npb, schedules_pb2 as spb
from sluice_examples.clickstream.generate import MARKETPLACES, generate_hour
from sluice_services.composition import SERVICES
from sluice_services.streams import schedule_recorded
from tests.conftest import free_port
from tests.e2e.conftest import eventually

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(900)]

NAMESPACE = "experiments"
FINISHED = (npb.COMPLETED, npb.FAILED, npb.LOST)


def schedule() -> spb.Schedule:
    return spb.Schedule(
        name="hourly_metrics_on_arrival", enabled=True,
        program=npb.ProgramRef(namespace=NAMESPACE, app="clickstream", program="hourly_metrics"),
        trigger=spb.Trigger(partition=spb.PartitionTrigger(namespace=NAMESPACE, dataset="clickstream", count=1)))


def inputs(data_dir: Path) -> list[PartitionRef]:
    refs = []
    for marketplace in ("US", "JP"):
        local_hour = datetime(2026, 11, 22, 9, tzinfo=ZoneInfo(MARKETPLACES[marketplace]))
        p = generate_hour(data_dir / "data", NAMESPACE, marketplace, local_hour, rows=300, seed=9)
        refs.append(PartitionRef(p["key"], p["location"], p["size_bytes"], p["record_count"]))
    return refs


def publish_and_collect(publisher: SluiceClient, runs_client: SluiceClient, data_dir: Path, spark) -> list[tuple]:
    for ref in inputs(data_dir):
        publisher.publish_partitions(NAMESPACE, "clickstream", [ref])
    runs = eventually(lambda: (r := runs_client.list_runs()) and len(r) == 2 and all(x.status in FINISHED for x in r)
                      and r, timeout=240, what="two finished runs")
    assert [npb.RunStatus.Name(r.status) for r in runs] == ["COMPLETED"] * 2, [r.error for r in runs]
    frame = spark.read.parquet(*[o.partition.location for r in runs for o in r.outputs])
    return sorted(tuple(row) for row in frame.drop("p50_latency_ms", "p95_latency_ms").collect())


def postgres_url(dsn: str) -> str:
    parts = conninfo_to_dict(dsn)
    return f"postgresql://{parts['user']}@{parts['host']}:{parts['port']}/{parts['dbname']}"


def wait_until_matcher_observed(dsn: str, schedule_id: str) -> None:
    """The schedule reaches the matcher over the bus; a notification published before that finds no schedule."""
    log = PostgresEventLog(dsn)
    try:
        eventually(lambda: schedule_recorded(log, schedule_id), timeout=60, what="the matcher to observe the schedule")
    finally:
        log.close()


def test_seven_processes_on_kafka_and_postgres_produce_what_embedded_mode_produces(tmp_path, spark, postgres):
    with KafkaBroker() as kafka, contextlib.ExitStack() as stack:
        dsn = postgres_url(postgres.create_database())
        data_dir = tmp_path / "distributed"
        common = ["--event-log", dsn, "--bus", f"kafka://{kafka.bootstrap}"]
        datasets_port = free_port()
        told = {"datasets": ["--port", str(datasets_port)],
                "launcher": ["--datasets-address", f"127.0.0.1:{datasets_port}"]}
        servers = {name: LocalServer(data_dir, command=("serve", name), args=[*common, *told.get(name, [])])
                   for name in SERVICES}
        for server in servers.values():
            stack.callback(server.stop)
        start_registry_first(servers)
        pids = {server.pid for server in servers.values()}
        assert len(pids) == len(SERVICES) == 7, "every service is its own process"
        clients = {name: stack.enter_context(SluiceClient(server.address)) for name, server in servers.items()}

        created = clients["registry"].create_schedule(schedule())
        wait_until_matcher_observed(dsn, created.id)
        distributed = publish_and_collect(clients["registry"], clients["launcher"], data_dir, spark)

        jobs = clients["checker"].list_jobs(created.id)
        assert [jobs_pb2.JobState.Name(j.state) for j in jobs] == ["LAUNCHED", "LAUNCHED"]

        def children_complete():
            found = [r for r in clients["lineage"].lineage_runs(job_namespace=NAMESPACE)
                     if r.state == "COMPLETE" and r.parent_run_id]
            return found if len(found) == 4 else None          # two program runs, their Spark applications
        lineage = eventually(children_complete, timeout=60, what="lineage")
        assert sum(r.job_name.endswith(".spark") for r in lineage) == 2

    with LocalServer(tmp_path / "embedded") as server, SluiceClient(server.address) as client:
        client.create_schedule(schedule())
        embedded = publish_and_collect(client, client, tmp_path / "embedded", spark)

    assert distributed == embedded and len(distributed) > 0
