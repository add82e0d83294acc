"""Backfill of 7 days x 3 marketplaces on a real `sluice standalone` (SQLite embedded), through the CLI,
with the server killed by SIGKILL in the middle and restarted on the same data dir: 21 jobs, one per
(marketplace, date) partition with its commit time as logical time, each partition run exactly once
(a ledger line per execution), never more than 2 programs at once (the schedule's concurrency)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from itertools import product
from pathlib import Path

import grpc
import pytest

from sluice.client import SluiceClient
from sluice.v1 import datasets_pb2 as dpb
from sluice.v1 import datasets_pb2_grpc, jobs_pb2
from sluice.v1 import notifications_pb2 as npb
from sluice.v1 import schedules_pb2 as spb
from sluice.wire.common import timestamp_from_proto
from sluice_services.localserver import LocalServer
from tests.e2e.conftest import eventually
from tests.integration.test_metrics_endpoint import scrape, total

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]
FAKE_SPARK_SUBMIT = REPO / "tests" / "support" / "fake_spark_submit.py"
NAMESPACE, APP, PROGRAM, DATASET = "experiments", "clickstream", "daily_export", "clickstream_daily_metrics"
MARKETPLACES = ("JP", "UK", "US")
DATES = [f"2026-11-{day:02d}" for day in range(1, 8)]
MAX_RUNNING = 2

RECORDING_PROGRAM = """import json, os, sys, time
from pathlib import Path

raw = json.loads(Path(sys.argv[sys.argv.index("--sluice-context") + 1]).read_text())
ledger = raw["properties"]["ledger"]
partitions = [p["key"] for n in raw["notifications"] for p in n.get("partitions", [])]

def record(event):
    line = json.dumps({"event": event, "at": time.time(), "job_id": raw["job_id"], "partitions": partitions,
                       "logical_time": raw["system"]["logical_time"]})
    descriptor = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, (line + "\\n").encode())
    finally:
        os.close(descriptor)

record("start")
time.sleep(float(raw["properties"]["seconds"]))
record("end")
result = Path(raw["system"]["result_path"])
partial = result.with_name(result.name + ".partial")
partial.write_text(json.dumps({"outputs": [], "inputs": [], "consumed": [], "metrics": {}}))
os.replace(partial, result)
"""


def server_for(root: Path) -> LocalServer:
    return LocalServer(root / "sluice", args=["--apps-dir", str(root / "apps"), "--spark-submit",
                                              str(FAKE_SPARK_SUBMIT), "--spark-master", "local[1]",
                                              "--max-parallel-runs", "4", "--metrics-port", "0"])


def cli(server: LocalServer, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "sluice_services.cli", *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "SLUICE_SERVER": server.address})
    assert done.returncode == 0, (done.stdout, done.stderr)
    return done.stdout


def ledger_lines(ledger: Path) -> list[dict]:
    return [json.loads(line) for line in ledger.read_text().splitlines()] if ledger.exists() else []


def most_at_once(lines: list[dict]) -> int:
    moves = sorted((line["at"], 1 if line["event"] == "start" else -1) for line in lines)
    running = most = 0
    for _, move in sorted(moves, key=lambda m: (m[0], m[1])):  # an end before a start at the same instant
        running += move
        most = max(most, running)
    return most


def test_a_backfill_of_7_days_x_3_marketplaces_survives_a_kill_9(tmp_path):
    (tmp_path / "apps" / APP).mkdir(parents=True)
    (tmp_path / "apps" / APP / f"{PROGRAM}.py").write_text(RECORDING_PROGRAM)
    ledger = tmp_path / "ledger.jsonl"
    server = server_for(tmp_path).start()
    try:
        client = SluiceClient(server.address)
        partitions = datasets_pb2_grpc.PartitionsStub(client.channel)
        partitions.CreateDataset(dpb.CreateDatasetRequest(dataset=dpb.Dataset(
            namespace=NAMESPACE, name=DATASET, base_location=str(tmp_path / "data"),
            partition_keys=[dpb.PartitionKey(name="marketplace", type=dpb.KEY_TYPE_STRING),
                            dpb.PartitionKey(name="date", type=dpb.KEY_TYPE_DATE)])), timeout=10)
        for date, marketplace in product(DATES + ["2026-11-08"], MARKETPLACES):  # the 8th: outside the range
            partitions.AddPartitions(dpb.AddPartitionsRequest(namespace=NAMESPACE, dataset=DATASET, partitions=[
                npb.PartitionRef(key=[npb.KeyValue(name="marketplace", value=marketplace),
                                      npb.KeyValue(name="date", value=date)],
                                 location=str(tmp_path / "data" / marketplace / date))]), timeout=10)
        eventually(lambda: _notifications_looked_up(server) >= 24, timeout=30,
                   what="every partition's notification past the matcher's lookup, so none reaches the schedule")
        listed = partitions.ListPartitions(dpb.ListPartitionsRequest(namespace=NAMESPACE, dataset=DATASET), timeout=10)
        committed = {(kv["marketplace"], kv["date"]): timestamp_from_proto(p.committed_at)
                     for p in listed.partitions for kv in [{k.name: k.value for k in p.partition.key}]}
        schedule = client.create_schedule(spb.Schedule(
            name="daily_export", enabled=True, program=npb.ProgramRef(namespace=NAMESPACE, app=APP, program=PROGRAM),
            trigger=spb.Trigger(partition=spb.PartitionTrigger(namespace=NAMESPACE, dataset=DATASET, count=1)),
            constraints=[spb.Constraint(concurrency=spb.ConcurrencyConstraint(max_running=MAX_RUNNING))],
            properties={"ledger": str(ledger), "seconds": "0.7"}))
        eventually(lambda: _known_to_checker(client, schedule.id), timeout=30, what="the checker to know the schedule")

        started = cli(server, "schedules", "backfill", schedule.id, "--keys", "date=2026-11-01..2026-11-08")
        assert ": 21 jobs:" in started, started
        backfill_id = started.split()[1]
        eventually(lambda: sum(line["event"] == "end" for line in ledger_lines(ledger)) >= 5, timeout=120,
                   what="five runs done before the kill")
        before = _backfill(client, backfill_id)
        client.close()
        server.process.kill()  # SIGKILL: no shutdown of any kind
        server.process.wait()
        server.process.stdout.close()

        server = server_for(tmp_path).start()
        client = SluiceClient(server.address)
        progress = eventually(lambda: (b := _backfill(client, backfill_id)).done == 21 and b, timeout=180,
                              what="every job of the backfill done")
        assert (progress.total, progress.failed, progress.running, progress.waiting, progress.discarded) == \
            (21, 0, 0, 0, 0)
        assert "21 done (0 failed), 0 running, 0 waiting" in cli(server, "backfills", "get", backfill_id)
        jobs = [job for job in client.list_jobs(schedule.id) if job.id != ""]
        assert len(jobs) == 21 and all(job.state == jobs_pb2.LAUNCHED for job in jobs)
    finally:
        server.stop()

    lines = ledger_lines(ledger)
    starts = [line for line in lines if line["event"] == "start"]
    ran = sorted((p["marketplace"], p["date"]) for line in starts for p in line["partitions"])
    assert ran == sorted(product(MARKETPLACES, DATES)), "each partition of the range exactly once"
    assert all(len(line["partitions"]) == 1 for line in starts)
    for line in starts:
        (partition,) = line["partitions"]
        assert line["logical_time"] == committed[(partition["marketplace"], partition["date"])].isoformat()
    assert before.done < 21, "killed in the middle of the backfill"
    assert most_at_once(lines) == MAX_RUNNING  # the constraint bound: two went at once, never three


def _known_to_checker(client: SluiceClient, schedule_id: str) -> bool:
    """A backfill of an empty range is refused as empty (INVALID_ARGUMENT), no longer as unknown (NOT_FOUND)."""
    try:
        client.jobs.StartBackfill(jobs_pb2.StartBackfillRequest(
            schedule_id=schedule_id, keys=[jobs_pb2.KeyRange(name="date", lower="1999-01-01", upper="1999-01-02")]),
            timeout=10)
    except grpc.RpcError as error:
        return error.code() == grpc.StatusCode.INVALID_ARGUMENT
    raise AssertionError("a backfill of an empty range started")


def _notifications_looked_up(server: LocalServer) -> float:
    return total(scrape(server.metrics_address), "sluice_consumer_messages_total", group="trigger-matcher-lookup")


def _backfill(client: SluiceClient, backfill_id: str) -> jobs_pb2.Backfill:
    return client.jobs.GetBackfill(jobs_pb2.GetBackfillRequest(id=backfill_id), timeout=10)
