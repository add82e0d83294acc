"""The walking skeleton end to end: `sluice standalone` as a process, real gRPC on loopback,
`sluice notify partition` and the client SDK, real spark-submit, then the produced data, the run
records and the lineage records are checked."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from sluice.bus.inprocess import InProcessBus
from sluice.bus.topics import PARTITION_NOTIFICATIONS, PROGRAM_NOTIFICATIONS
from sluice.client import SluiceClient
from sluice.domain.common import PartitionRef
from sluice_services.localserver import LocalServer
from sluice.wire.common import notification_from_bytes
from sluice.v1 import jobs_pb2, notifications_pb2 as npb, schedules_pb2 as spb
from sluice_examples.clickstream.generate import MARKETPLACES, generate_hour
from tests.e2e.conftest import eventually

pytestmark = [pytest.mark.slow, pytest.mark.integration]

NAMESPACE = "experiments"
SCHEDULE = "hourly_metrics_on_arrival"


def hourly_schedule() -> spb.Schedule:
    return spb.Schedule(
        name=SCHEDULE, enabled=True, properties={"experiment": "exp-42"},
        program=npb.ProgramRef(namespace=NAMESPACE, app="clickstream", program="hourly_metrics"),
        trigger=spb.Trigger(partition=spb.PartitionTrigger(namespace=NAMESPACE, dataset="clickstream", count=1)))


def generate(data_dir: Path, marketplace: str, hour: int) -> dict:
    local_hour = datetime(2026, 11, 22, hour, tzinfo=ZoneInfo(MARKETPLACES[marketplace]))
    return generate_hour(data_dir, NAMESPACE, marketplace, local_hour, rows=300, seed=hour)


def expected_counts(partition: dict) -> Counter:
    counts: Counter = Counter()
    for path in Path(partition["location"]).glob("*.json"):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            counts[(event["experiment_id"], event["bucket"], event["event_type"])] += 1
    return counts


def notify_with_cli(address: str, partition: dict) -> str:
    keys = [arg for k, v in partition["key"].items() for arg in ("--key", f"{k}={v}")]
    result = subprocess.run(
        [sys.executable, "-m", "sluice_services.cli", "--server", address, "--json", "notify", "partition",
         "--namespace", NAMESPACE, "--dataset", "clickstream", *keys, "--location", partition["location"],
         "--size-bytes", str(partition["size_bytes"]), "--record-count", str(partition["record_count"])],
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["id"]


def test_partition_triggered_pyspark_run_end_to_end(tmp_path, spark):
    data_dir = tmp_path / "sluice"
    with LocalServer(data_dir) as server, SluiceClient(server.address) as client:
        schedule = client.create_schedule(hourly_schedule())
        us = generate(data_dir / "data", "US", 9)
        jp = generate(data_dir / "data", "JP", 9)
        notify_with_cli(server.address, us)
        client.publish_partitions(NAMESPACE, "clickstream", [PartitionRef(jp["key"], jp["location"], jp["size_bytes"],
                                                                          jp["record_count"])])

        runs = eventually(lambda: (r := client.list_runs(schedule.id)) and len(r) == 2
                          and all(x.status in (npb.COMPLETED, npb.FAILED) for x in r) and r,
                          timeout=240, what="two finished runs")
        assert [npb.RunStatus.Name(r.status) for r in runs] == ["COMPLETED", "COMPLETED"], [r.error for r in runs]

        # Run records: each run consumed exactly its triggering partition and wrote one output partition.
        by_marketplace = {dict((kv.name, kv.value) for kv in r.inputs[0].key)["marketplace"]: r for r in runs}
        assert set(by_marketplace) == {"US", "JP"}
        for marketplace, partition in (("US", us), ("JP", jp)):
            run = by_marketplace[marketplace]
            assert [i.location for i in run.inputs] == [partition["location"]]
            assert [(o.namespace, o.dataset) for o in run.outputs] == [(NAMESPACE, "clickstream_hourly_metrics")]
            output = run.outputs[0].partition
            assert [(kv.name, kv.value) for kv in output.key] == list(partition["key"].items())
            assert output.location == str(data_dir.resolve() / "data" / NAMESPACE / "clickstream_hourly_metrics"
                                          / f"marketplace={marketplace}" / "date=2026-11-22" / "hour=09")

            # Output data: views and clicks per experiment bucket equal a recount of the input events.
            rows = spark.read.parquet(output.location).collect()
            assert output.record_count == len(rows) > 0
            counts = expected_counts(partition)
            for row in rows:
                assert row["marketplace"] == marketplace
                assert row["views"] == counts[(row["experiment_id"], row["bucket"], "view")]
                assert row["clicks"] == counts[(row["experiment_id"], row["bucket"], "click")]
                assert row["purchases"] == counts[(row["experiment_id"], row["bucket"], "purchase")]
            assert sum(r["events"] for r in rows) == partition["record_count"]

        # Jobs: one per partition, launched, each with the run it produced.
        jobs = client.list_jobs(schedule.id)
        assert sorted(jobs_pb2.JobState.Name(j.state) for j in jobs) == ["LAUNCHED", "LAUNCHED"]
        assert {j.id for j in jobs} == {r.job_id for r in runs}

        # Lineage: the program's job sits under the schedule's job; each program run under its job's run.
        def lineage_complete():
            found = client.lineage_runs(job_namespace=NAMESPACE)
            return found if sum(r.state == "COMPLETE" for r in found) == 6 else None   # and 2 Spark applications

        lineage_runs = eventually(lineage_complete, timeout=30, what="lineage of both runs")
        jobs_by_name = {j.name: j for j in client.lineage_jobs(NAMESPACE)}
        parent_name = f"clickstream.{SCHEDULE}"
        child_name = f"{parent_name}.hourly_metrics"
        assert jobs_by_name[child_name].parent_job_name == parent_name
        assert jobs_by_name[child_name].simple_name == "hourly_metrics"
        assert jobs_by_name[parent_name].parent_job_name == ""
        program_runs = {r.run_id: r for r in lineage_runs if r.job_name == child_name}
        assert set(program_runs) == {r.id for r in runs}
        for run in runs:
            assert program_runs[run.id].parent_run_id == run.job_id
            assert program_runs[run.id].inputs == [f"{NAMESPACE}/clickstream"]
            assert program_runs[run.id].outputs == [f"{NAMESPACE}/clickstream_hourly_metrics"]
        schedule_runs = {r.run_id for r in lineage_runs if r.job_name == parent_name}
        assert schedule_runs == {r.job_id for r in runs}
        spark_runs = [r for r in lineage_runs if r.job_name == f"{child_name}.spark"]
        assert sorted(r.parent_run_id for r in spark_runs) == sorted(r.id for r in runs)

        # Bus: program-status notifications for every run, and one partition notification per output.
        statuses, outputs = asyncio.run(read_bus(data_dir / "bus.db"))
        for run in runs:
            assert statuses[run.id] == ["RUNNING", "COMPLETED"]
        assert sorted(outputs) == sorted(r.outputs[0].partition.location for r in runs)


async def read_bus(path: Path) -> tuple[dict[str, list[str]], list[str]]:
    """Read the standalone's durable bus file as another process would."""
    bus = InProcessBus(path)
    consumer = bus.consumer("e2e-probe", [PROGRAM_NOTIFICATIONS, PARTITION_NOTIFICATIONS])
    statuses: dict[str, list[str]] = {}
    outputs: list[str] = []
    while records := await consumer.poll(timeout=1):
        for record in records:
            notification = notification_from_bytes(record.value)
            payload = notification.payload
            if record.topic == PROGRAM_NOTIFICATIONS:
                statuses.setdefault(payload.run_id, []).append(payload.status.value)
            elif payload.dataset == "clickstream_hourly_metrics":
                outputs += [p.location for p in payload.partitions]
    await consumer.close()
    await bus.close()
    return statuses, outputs
