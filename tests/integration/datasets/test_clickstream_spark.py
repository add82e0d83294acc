"""The clickstream programs under the REAL spark-submit with partition consumers: hourly metrics
consume the new clickstream partitions, the launcher's publisher registers their outputs through a
commit sequence, and the UK daily aggregate consumes the UK hourly metrics and writes its local day."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sluice.clock import SystemClock
from sluice.datasets import PartitionQuery
from sluice.domain.consumer import ConsumerRef, Outcome
from sluice.domain.datasets import Partition
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.wire.datasets import dataset_from_proto
from sluice_examples.clickstream import datasets as clickstream
from sluice_examples.clickstream.app import HOURLY_METRICS_ENTRY_POINT, NAMESPACE
from sluice_examples.clickstream.generate import generate_hour, hours_for
from sluice_services.datasets.run_outputs import RunPublisher
from sluice_services.datasets.service import DatasetsService
from tests.support.partitions_api import PartitionsApiServer

pytestmark = [pytest.mark.slow, pytest.mark.integration]

SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"
SPARK_ARGS = ["--master", "local[1]", "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=1",
              "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1"]
DAY = "2026-11-22"
ROWS = 400


def spark_submit(script: str | Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "SPARK_LOCAL_IP": "127.0.0.1"}
    return subprocess.run([str(SPARK_SUBMIT), *SPARK_ARGS, str(script), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


class Launcher:
    """What the launcher does around a run: context.json in, spark-submit, result.json out, publish;
    the datasets service's Partitions API serves the program's consumers."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.log = SqliteEventLog(root / "events.db")
        self.plane = DatasetsService(self.log, SystemClock())
        self.publisher = RunPublisher(self.plane, root / "data")
        self.api = PartitionsApiServer(self.plane).__enter__()

    def close(self) -> None:
        self.api.__exit__(None, None, None)
        self.log.close()

    def run(self, entry_point: str | Path, run_id: str, program: str, **properties: str) -> dict:
        run_dir = self.root / "runs" / run_id
        run_dir.mkdir(parents=True)
        context = {"run_id": run_id, "job_id": f"job-{run_id}", "schedule": None,
                   "program": {"namespace": NAMESPACE, "app": "clickstream", "program": program},
                   "properties": properties, "notifications": [], "lineage": None,
                   "system": {"logical_time": None, "data_dir": str(self.root / "data"),
                              "staging_dir": str(run_dir / "staging"), "result_path": str(run_dir / "result.json"),
                              **self.api.context_for(run_id)}}
        (run_dir / "context.json").write_text(json.dumps(context))
        proc = spark_submit(entry_point, "--sluice-context", str(run_dir / "context.json"), cwd=self.root)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        result = json.loads((run_dir / "result.json").read_text())
        self.publisher.publish(run_id, result)
        return result


def read_parquet(root: Path, locations: list[str]) -> list[dict]:
    reader = root / "read_parquet.py"
    reader.write_text(
        "import json, sys\nfrom pyspark.sql import SparkSession\n"
        "spark = SparkSession.builder.getOrCreate()\n"
        "rows = [r.asDict() for loc in sys.argv[2:] for r in spark.read.parquet('file://' + loc).collect()]\n"
        "open(sys.argv[1], 'w').write(json.dumps(rows))\nspark.stop()\n")
    proc = spark_submit(reader, str(root / "rows.json"), *locations, cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((root / "rows.json").read_text())


@pytest.fixture
def launcher(tmp_path: Path):
    launcher = Launcher(tmp_path)
    yield launcher
    launcher.close()


def test_hourly_then_daily_metrics_through_partition_consumers(tmp_path: Path, launcher: Launcher):
    assert SPARK_SUBMIT.exists(), f"no spark-submit next to {sys.executable} (pyspark is a dependency)"
    datasets = launcher.plane.datasets
    for request in clickstream.datasets_requests(tmp_path / "data"):
        datasets.create(dataset_from_proto(request.dataset))
    for marketplace, hours in (("UK", [9, 10, 11]), ("JP", [9])):
        for local_hour in hours_for(marketplace, DAY, hours):
            p = generate_hour(tmp_path / "data", NAMESPACE, marketplace, local_hour, ROWS, seed=7)
            datasets.add(NAMESPACE, "clickstream", [Partition(p["key"], p["location"], p["size_bytes"],
                                                              p["record_count"])])

    launcher.run(HOURLY_METRICS_ENTRY_POINT, "run-hourly-1", "hourly_metrics")
    hourly = datasets.query(NAMESPACE, clickstream.HOURLY_DATASET, PartitionQuery())
    assert sorted((p.partition.key["marketplace"], p.partition.key["hour"]) for p in hourly) == [
        ("JP", "9"), ("UK", "10"), ("UK", "11"), ("UK", "9")]
    consumer = launcher.plane.consumers.state(ConsumerRef(NAMESPACE, "clickstream", "clickstream_hourly_metrics"))
    assert [r.outcome for r in consumer.history] == [Outcome.COMPLETED] * 4 and consumer.working_set == ()
    again = launcher.run(HOURLY_METRICS_ENTRY_POINT, "run-hourly-2", "hourly_metrics")
    assert again["outputs"] == []   # nothing new

    result = launcher.run(clickstream.DAILY_ENTRY_POINT, "run-daily-uk", "daily_metrics", marketplace="UK")
    assert result["metrics"]["hourly_partitions"] == 3
    (daily,) = datasets.query(NAMESPACE, clickstream.DAILY_DATASET, PartitionQuery())
    assert daily.partition.key == {"marketplace": "UK", "date": DAY}
    rows = read_parquet(tmp_path, [daily.partition.location])
    assert sum(r["events"] for r in rows) == 3 * ROWS and all(r["hours"] == 3 for r in rows)
    assert {r["marketplace"] for r in rows} == {"UK"}
