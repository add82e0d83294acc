"""`make demo`'s flow on a real `sluice standalone` with the REAL spark-submit: the hourly program runs
one at a time, the partitions committed while its first run goes join the next run's job, and each
line of the demo's runs table says what that run really consumed -- the partitions its consumer
handed it, as the run record's inputs and outputs also tell, and their rows."""
from __future__ import annotations

import sys
from pathlib import Path

import grpc
import pytest

from sluice.client import SluiceClient
from sluice.v1 import datasets_pb2_grpc, jobs_pb2, notifications_pb2
from sluice_examples.clickstream import app, demo, report
from sluice_examples.clickstream import datasets as clickstream_datasets
from sluice_services.localserver import LocalServer

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(900)]

SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"
ROWS = 100


def test_each_runs_line_is_what_it_consumed_and_later_partitions_join_the_waiting_run(tmp_path: Path):
    assert SPARK_SUBMIT.exists(), f"no spark-submit next to {sys.executable} (pyspark is a dependency)"
    with LocalServer(tmp_path / "sluice", args=["--max-parallel-runs", "2"]) as server, \
            SluiceClient(server.address) as client, grpc.insecure_channel(server.address) as channel:
        client.wait_ready()
        partitions = datasets_pb2_grpc.PartitionsStub(channel)
        data = tmp_path / "sluice" / "data"  # the datasets under the server's data dir, where outputs are published
        for request in clickstream_datasets.datasets_requests(data):
            partitions.CreateDataset(request, timeout=30)
        client.schedules.DeployApp(demo.deploy_request(), timeout=30)
        hourly = next(s for s in client.list_schedules(app.NAMESPACE) if s.name == app.HOURLY_METRICS_ON_ARRIVAL.name)
        assert [c.concurrency.max_running for c in hourly.constraints] == [1]
        published = demo.publish_hours(partitions, data, "2026-11-22", [9, 10], ROWS)
        runs = demo.wait_for_runs(client, hourly.id, len(published), timeout=800)
        jobs = client.list_jobs(hourly.id)
        records = demo.input_records(partitions)  # the dataset's keys, as it normalized them (hour 09 -> 9)
        lines = report.run_lines(runs, {j.id: j for j in jobs}, demo.consumed_by_run(partitions), records)

    assert all(r.status == notifications_pb2.COMPLETED for r in runs), [r.error for r in runs]
    assert len(runs) < len(published) and any(j.state == jobs_pb2.JOINED for j in jobs)
    every = ["/".join(values) for values in records]
    assert len(every) == len(published)
    consumed = [key for line in lines for key in line.consumed]
    assert sorted(consumed) == sorted(every)  # each partition consumed once, none left over
    for run, line in zip(runs, lines):
        inputs = sorted(report.key_text({kv.name: kv.value for kv in i.key}) for i in run.inputs)
        outputs = sorted(report.key_text({kv.name: kv.value for kv in o.partition.key}) for o in run.outputs)
        assert line.consumed and sorted(line.consumed) == inputs == outputs, (line, inputs, outputs)
        assert line.rows_in == ROWS * len(line.consumed)
        assert line.rows_out == sum(o.partition.record_count for o in run.outputs) > 0
        assert sorted(line.triggered_by) == sorted(line.consumed)  # it took what its trigger brought
        cells = line.row()
        assert cells[5] == f"{len(line.consumed)}: {' '.join(line.consumed)}" and cells[6:] == (line.rows_in,
                                                                                              line.rows_out)
