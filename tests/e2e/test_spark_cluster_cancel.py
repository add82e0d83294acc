"""Cancel of a run on a real Spark standalone cluster (a master and a worker, separate JVMs from
pyspark's jars on loopback, tests/support/spark_cluster.py): the launcher kills the process group of
the run's client-mode driver (spark-submit's JVM and the Python driver), and the application ends on
the master with it (the master's JSON API lists it among the completed applications, none active);
the run ends KILLED and carries the application's id."""
from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from datetime import datetime, timezone

import pytest

from sluice.clock import SystemClock
from sluice.domain.common import ProgramRef, RunStatus
from sluice.domain.jobs import Job, TriggerContext
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.ids import derived_id
from sluice_services.launcher.programs import DirectoryCatalog, SparkConfig, SparkSubmitter
from sluice_services.launcher.service import LauncherService
from tests.integration.test_launcher_history import request
from tests.integration.test_launcher_restart import eventually
from tests.support.spark_cluster import SparkCluster, kill_programs_under

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(900)]

PROGRAM = ProgramRef("ops", "etl", "on_cluster")
ON_THE_CLUSTER = """
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


async def test_cancel_ends_the_spark_application_on_the_master(tmp_path):
    with SparkCluster(tmp_path / "spark", workers=1) as cluster:
        try:
            apps = tmp_path / "apps" / PROGRAM.app
            apps.mkdir(parents=True)
            (apps / f"{PROGRAM.program}.py").write_text(ON_THE_CLUSTER)
            log = SqliteEventLog(tmp_path / "events.db")
            config = SparkConfig(master=cluster.master_url, driver_host="127.0.0.1", executor_memory="512m",
                                 conf={"spark.cores.max": "1", "spark.ui.enabled": "false"})
            launcher = LauncherService(log, SystemClock(), DirectoryCatalog(tmp_path / "apps"), SparkSubmitter(config, 0.2),
                                       tmp_path / "data")
            launcher.recover()
            job = Job(derived_id("job", "cluster"), "schedule-1", 1, PROGRAM, TriggerContext("schedule-1", "c"),
                      datetime.now(timezone.utc))
            launching = asyncio.ensure_future(request(launcher, job))
            run_id = await eventually(lambda: next((r.id for r in launcher.runs() if r.attempt.spark_application_id),
                                                   None), "the driver to report its application", timeout=300)
            app_id = launcher.get(run_id).spark_application_id
            assert app_id.startswith("app-") and master_apps(cluster.master_webui)["active"] == [app_id]

            began = time.monotonic()
            run = await launcher.cancel(run_id, "on the cluster", "token:ops")
            assert run.status is RunStatus.KILLED and time.monotonic() - began < 5
            await asyncio.wait_for(launching, 30)
            apps_now = await eventually(lambda: (found := master_apps(cluster.master_webui))["completed"] and found,
                                        "the master to see the application end", timeout=60)
            assert apps_now == {"active": [], "completed": [app_id]}
            assert launcher.get(run_id).spark_application_id == app_id
            log.close()
        finally:
            kill_programs_under(tmp_path / "data")
            kill_programs_under(tmp_path / "runs")
