"""A real spark-submit of the clickstream hourly program for UK and JP, with the lineage section the
launcher writes into context.json: the SDK records the Spark application as a child run of the
program run in openlineage.jsonl, and the launcher's forwarding turns it into lineage."""
from __future__ import annotations

import json
import sys
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyspark
import pytest
from openlineage.client.event_v2 import RunState

from sluice.clock import SimulatedClock
from sluice.domain.common import ProgramRef, RunStatus
from sluice.domain.datasets import Partition
from sluice.domain.jobs import Job, TriggerContext
from sluice.domain.lineage import dataset_key
from sluice.domain.runs import Run
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.wire.datasets import dataset_from_proto
from sluice_examples.clickstream import datasets as clickstream
from sluice_examples.clickstream.app import HOURLY_METRICS_ENTRY_POINT, NAMESPACE
from sluice_examples.clickstream.generate import generate_hour, hours_for
from sluice_services.launcher import lineage_events
from sluice_services.launcher.context_file import build_context
from sluice_services.lineage.service import LineageService
from tests.integration.datasets.test_clickstream_spark import SPARK_SUBMIT, Launcher, spark_submit
from tests.integration.datasets.test_clickstream_spark import launcher  # noqa: F401 (the fixture)

pytestmark = [pytest.mark.slow, pytest.mark.integration]
SCHEDULE_JOB = "clickstream.hourly_metrics_on_arrival"


def test_a_real_spark_application_is_the_child_run_of_its_program_run(tmp_path: Path, launcher: Launcher):  # noqa: F811
    assert SPARK_SUBMIT.exists(), f"no spark-submit next to {sys.executable} (pyspark is a dependency)"
    for request in clickstream.datasets_requests(tmp_path / "data"):
        launcher.plane.datasets.create(dataset_from_proto(request.dataset))
    for marketplace in ("UK", "JP"):
        (local_hour,) = hours_for(marketplace, "2026-11-22", [9])
        p = generate_hour(tmp_path / "data", NAMESPACE, marketplace, local_hour, 50, seed=7)
        launcher.plane.datasets.add(NAMESPACE, "clickstream", [Partition(p["key"], p["location"], p["size_bytes"],
                                                                         p["record_count"])])
    at = datetime.now(timezone.utc)
    job = Job(str(uuid.uuid4()), "schedule", 1, ProgramRef(NAMESPACE, "clickstream", "hourly_metrics"),
              TriggerContext("schedule", "hourly_metrics_on_arrival"), at)
    run = Run(str(uuid.uuid4()), job, RunStatus.COMPLETED, at)
    run_dir = tmp_path / "runs" / run.id
    context = build_context(run.id, job, tmp_path / "data", run_dir)
    context["system"].update(launcher.api.context_for(run.id))
    run_dir.mkdir(parents=True)
    (run_dir / "context.json").write_text(json.dumps(context))

    proc = spark_submit(HOURLY_METRICS_ENTRY_POINT, "--sluice-context", str(run_dir / "context.json"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    log = SqliteEventLog(":memory:", clock=SimulatedClock(at))
    service = LineageService(log, SimulatedClock(at))
    for message in [*lineage_events.run_started(run, at),
                    *lineage_events.run_ended(run, RunState.COMPLETE, at + timedelta(minutes=1), run_dir)]:
        service.handle_message(message)
    (spark,) = service.state.children_of(run.id)
    assert (spark.job_name, spark.state) == (f"{SCHEDULE_JOB}.hourly_metrics.spark", "COMPLETE")
    assert service.state.runs[run.id].parent_run_id == job.id and service.state.runs[job.id].job_name == SCHEDULE_JOB
    assert spark.inputs == (dataset_key(NAMESPACE, "clickstream"),)
    assert spark.outputs == (dataset_key(NAMESPACE, clickstream.HOURLY_DATASET),)
    start = json.loads((run_dir / "openlineage.jsonl").read_text().splitlines()[0])
    assert start["run"]["facets"]["processing_engine"]["version"] == pyspark.__version__
    assert start["run"]["facets"]["sluice_sparkApplication"]["applicationId"].startswith("local-")
    log.close()
