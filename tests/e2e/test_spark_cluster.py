"""Programs on a real Spark standalone cluster: a master and two workers, each its own JVM from pyspark's
jars on loopback (tests/support/spark_cluster.py, what `make spark-up` runs), the drivers in client mode
beside the launcher. The services run as separate processes on Kafka and PostgreSQL; the clickstream
program's rows equal embedded mode's (local[*]), and every run carries its Spark application id.
A second test serves everything on 127.0.0.2 with the cluster on 127.0.0.1: the executors reach the
drivers there, so no address is pinned. A cancelled run's client-mode driver is killed with its process
group and the application ends on the master (its JSON API: none active, this one completed)."""
from __future__ import annotations

import asyncio
import contextlib
import json
import time
import urllib.request
from datetime import datetime, timezone
from urllib.parse import urlparse

import pytest

from sluice.client import SluiceClient
from sluice.clock import SystemClock
from sluice.domain.common import ProgramRef, RunStatus
from sluice.domain.jobs import Job, TriggerContext
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.ids import derived_id
from sluice.v1 import notifications_pb2 as npb
from sluice_examples.clickstream.demo_cluster import start_services
from sluice_services.launcher.programs import DirectoryCatalog, SparkConfig, SparkSubmitter
from sluice_services.launcher.service import LauncherService
from sluice_services.localserver import LocalServer
from tests.integration.test_launcher_history import request
from tests.e2e.test_distributed import FINISHED, NAMESPACE, inputs, postgres_url, schedule, wait_until_matcher_observed
from tests.support.kafka import KafkaBroker
from tests.support.spark_cluster import SparkCluster, kill_programs_under
from tests.support.waiting import eventually, until

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(1800)]

ON_THE_CLUSTER = ("--spark-conf", "spark.cores.max=1", "--spark-executor-memory", "512m",
                  "--spark-conf", "spark.ui.enabled=true", "--spark-conf", "spark.ui.port=0")
"""One core per application, so two runs share the two workers instead of queueing; a driver UI each."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with SparkCluster(tmp_path_factory.mktemp("spark-cluster")) as started:
        yield started


def test_services_on_kafka_and_postgres_run_programs_on_the_cluster_as_embedded_mode_does(tmp_path, spark, cluster,
                                                                                         postgres):
    assert len(set(cluster.pids().values())) == 3, "a master and two workers, each its own process"
    data_dir = tmp_path / "cluster"
    with KafkaBroker() as kafka, contextlib.ExitStack() as stack:
        stack.callback(kill_programs_under, data_dir)
        dsn = postgres_url(postgres.create_database())
        common = ["--event-log", dsn, "--bus", f"kafka://{kafka.bootstrap}"]
        servers = start_services(stack, data_dir, common, ["--spark-master", cluster.master_url, *ON_THE_CLUSTER])
        clients = {name: stack.enter_context(SluiceClient(server.address)) for name, server in servers.items()}

        created = clients["registry"].create_schedule(schedule())
        wait_until_matcher_observed(dsn, created.id)
        on_cluster = publish_and_collect(clients["registry"], clients["launcher"], data_dir, spark)
        assert len(cluster.pids()) == 3 and all(_alive(pid) for pid in cluster.pids().values())

        runs = clients["launcher"].list_runs()
        assert all(r.spark_application_id.startswith("app-") for r in runs), [r.spark_application_id for r in runs]
        assert len({r.spark_application_id for r in runs}) == 2
        assert all(a.spark_application_id == r.spark_application_id for r in runs for a in r.attempts)
        assert all(urlparse(r.spark_ui_url).hostname == "127.0.0.1" for r in runs), [r.spark_ui_url for r in runs]

    with LocalServer(tmp_path / "embedded") as server, SluiceClient(server.address) as client:
        client.create_schedule(schedule())
        embedded = publish_and_collect(client, client, tmp_path / "embedded", spark)
        assert all(r.spark_application_id.startswith("local-") for r in client.list_runs())

    assert on_cluster == embedded and len(on_cluster) > 0


def publish_and_collect(publisher: SluiceClient, runs_client: SluiceClient, data_dir, spark) -> list[tuple]:
    """test_distributed's, with the time a loaded 2-core machine needs for two Spark applications on a cluster
    (each starts a driver and an executor JVM), and the runs' driver logs when they do not finish."""
    for ref in inputs(data_dir):
        publisher.publish_partitions(NAMESPACE, "clickstream", [ref])
    try:
        runs = eventually(lambda: (r := runs_client.list_runs()) and len(r) == 2 and all(x.status in FINISHED for x in r)
                          and r, timeout=900, what="two finished runs")
    except AssertionError:
        logs = {path: path.read_text()[-3000:] for path in data_dir.glob("**/driver.log")}
        raise AssertionError(f"runs: {runs_client.list_runs()}; driver logs: {logs}") from None
    assert [npb.RunStatus.Name(r.status) for r in runs] == ["COMPLETED"] * 2, [r.error for r in runs]
    frame = spark.read.parquet(*[o.partition.location for r in runs for o in r.outputs])
    return sorted(tuple(row) for row in frame.drop("p50_latency_ms", "p95_latency_ms").collect())


def test_a_launcher_serving_on_another_address_drives_its_programs_from_there(tmp_path, spark, cluster):
    data_dir = tmp_path / "elsewhere"
    args = ["--host", "127.0.0.2", "--spark-master", cluster.master_url, *ON_THE_CLUSTER]
    with contextlib.ExitStack() as stack:
        stack.callback(kill_programs_under, data_dir)
        server = stack.enter_context(LocalServer(data_dir, args=args))
        client = stack.enter_context(SluiceClient(server.address))
        assert server.address.startswith("127.0.0.2:")
        client.create_schedule(schedule())
        assert publish_and_collect(client, client, data_dir, spark)    # two runs COMPLETED, rows read back
        for run in client.list_runs():
            assert run.spark_application_id.startswith("app-"), "ran on the standalone cluster"
            assert urlparse(run.spark_ui_url).hostname == "127.0.0.2", run.spark_ui_url


def test_the_cluster_is_stopped_by_pid(tmp_path):
    with SparkCluster(tmp_path / "spark", workers=1) as started:
        pids = started.pids()
        assert eventually(lambda: all(_alive(pid) for pid in pids.values()), timeout=5, what="the processes")
    assert not any(_alive(pid) for pid in pids.values())
    assert not list((tmp_path / "spark").glob("*.pid"))


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


PROGRAM = ProgramRef("ops", "etl", "on_cluster")
CANCELLED_PROGRAM = """
import json, sys, time
from pathlib import Path
from pyspark.sql import SparkSession
from sluice.sdk.spark_application import write_spark_application
context = json.loads(Path(sys.argv[sys.argv.index("--sluice-context") + 1]).read_text())
spark = SparkSession.builder.appName("cancel-me").getOrCreate()   # registered with the master
write_spark_application(context["system"]["result_path"], spark.sparkContext.applicationId, spark.sparkContext.uiWebUrl)
time.sleep(600)
"""


def master_apps(webui: str) -> dict[str, list[str]]:
    with urllib.request.urlopen(f"{webui}/json/", timeout=10) as response:
        state = json.load(response)
    return {"active": [a["id"] for a in state["activeapps"]], "completed": [a["id"] for a in state["completedapps"]]}


async def test_cancel_ends_the_spark_application_on_the_master(tmp_path, cluster):
    try:
        apps = tmp_path / "apps" / PROGRAM.app
        apps.mkdir(parents=True)
        (apps / f"{PROGRAM.program}.py").write_text(CANCELLED_PROGRAM)
        log = SqliteEventLog(tmp_path / "events.db")
        config = SparkConfig(master=cluster.master_url, driver_host="127.0.0.1", executor_memory="512m",
                             conf={"spark.cores.max": "1", "spark.ui.enabled": "false"})
        launcher = LauncherService(log, SystemClock(), DirectoryCatalog(tmp_path / "apps"), SparkSubmitter(config, 0.2),
                                   tmp_path / "data")
        launcher.recover()
        job = Job(derived_id("job", "cluster"), "schedule-1", 1, PROGRAM, TriggerContext("schedule-1", "c"),
                  datetime.now(timezone.utc))
        launching = asyncio.ensure_future(request(launcher, job))
        run_id = await until(
            lambda: next((r.id for r in launcher.runs() if r.attempt.spark_application_id), None),
            "the driver to report its application", timeout=300)
        app_id = launcher.get(run_id).spark_application_id
        assert app_id.startswith("app-") and master_apps(cluster.master_webui)["active"] == [app_id]

        began = time.monotonic()
        run = await launcher.cancel(run_id, "on the cluster", "token:ops")
        assert run.status is RunStatus.KILLED and time.monotonic() - began < 5
        await asyncio.wait_for(launching, 30)
        apps_now = await until(
            lambda: app_id in (found := master_apps(cluster.master_webui))["completed"] and found,
            "the master to see the application end", timeout=60)
        assert apps_now["active"] == [] and app_id in apps_now["completed"]
        assert launcher.get(run_id).spark_application_id == app_id
        log.close()
    finally:
        kill_programs_under(tmp_path / "data")
        kill_programs_under(tmp_path / "runs")
