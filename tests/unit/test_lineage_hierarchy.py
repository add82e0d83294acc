"""Sluice's own runs in lineage, three levels deep: schedule run -> program run -> Spark application.

The launcher's events (services/launcher/lineage_events.py) and the SDK's Spark-application events
(sluice.sdk.lineage, the openlineage-python client's file transport into the attempt's directory)
go through the lineage service in a scrambled order; the clickstream example's hourly and daily
workflows for US, UK and JP are one job graph each, with per-marketplace runs."""
from __future__ import annotations

import json
import random
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from openlineage.client.event_v2 import RunState

from sluice.clock import SimulatedClock
from sluice.domain.common import PartitionRef, ProgramRef, RunStatus
from sluice.domain.jobs import Job, TriggerContext
from sluice.domain.lineage import dataset_key, render_tree
from sluice.domain.runs import InputPartition, OutputPartition, Run
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.sdk.context import Lineage
from sluice.sdk.lineage import SparkApplicationLineage, events_path
from sluice_examples.clickstream.datasets import DAILY_LINEAGE_JOB, LINEAGE_JOB_PROPERTY
from sluice_services.launcher import lineage_events
from sluice_services.launcher.context_file import build_context
from sluice_services.lineage.service import LineageService

T0 = datetime(2026, 11, 22, 9, tzinfo=timezone.utc)
NS = "experiments"
MARKETPLACES = ("US", "UK", "JP")
HOURLY = "clickstream.hourly_metrics_on_arrival"
DAILY = f"clickstream.{DAILY_LINEAGE_JOB}"


@pytest.fixture
def service():
    log = SqliteEventLog(":memory:", clock=SimulatedClock(T0))
    yield LineageService(log, SimulatedClock(T0))
    log.close()


def sluice_run(index: int, program: str, schedule: str, properties: dict, inputs: tuple, outputs: tuple) -> Run:
    job = Job(f"00000000-0000-4000-8000-{index:012d}", f"schedule-{schedule}", 1, ProgramRef(NS, "clickstream", program),
              TriggerContext(f"schedule-{schedule}", schedule, properties), T0)
    return Run(f"10000000-0000-4000-8000-{index:012d}", job, RunStatus.COMPLETED, T0, inputs=inputs, outputs=outputs)


def spark_application(run: Run, attempt_dir: Path, succeeded: bool | None, datasets=((), ())) -> str:
    """What the SDK does in the program: the Spark application's events, through the client's file transport."""
    attempt_dir.mkdir(parents=True, exist_ok=True)
    context = build_context(run.id, run.job, attempt_dir / "data", attempt_dir)
    spark = SparkApplicationLineage(Lineage(**context["lineage"]), events_path(context["system"]["result_path"]))
    spark.started("3.5.1", f"local-{run.id[-4:]}")
    if succeeded is not None:
        spark.finished(succeeded, *datasets)
    return spark.run_id


def clickstream_runs() -> list[Run]:
    """Hourly metrics for each marketplace (one schedule) and its daily metrics (one schedule per
    marketplace, in its own zone, sharing one lineage job)."""
    runs = []
    for index, marketplace in enumerate(MARKETPLACES):
        hour = {"marketplace": marketplace, "date": "2026-11-22", "hour": "9"}
        day = {"marketplace": marketplace, "date": "2026-11-22"}
        runs.append(sluice_run(index, "hourly_metrics", "hourly_metrics_on_arrival", {},
                               (InputPartition(NS, "clickstream", PartitionRef(hour, f"/in/{marketplace}")),),
                               (OutputPartition(NS, "clickstream_hourly_metrics", PartitionRef(hour, f"/h/{marketplace}")),)))
        runs.append(sluice_run(10 + index, "daily_metrics", f"daily_metrics_{marketplace.lower()}",
                               {"marketplace": marketplace, LINEAGE_JOB_PROPERTY: DAILY_LINEAGE_JOB},
                               (InputPartition(NS, "clickstream_hourly_metrics", PartitionRef(hour, f"/h/{marketplace}")),),
                               (OutputPartition(NS, "clickstream_daily_metrics", PartitionRef(day, f"/d/{marketplace}")),)))
    return runs


def test_hourly_and_daily_clickstream_for_three_marketplaces_are_two_job_graphs_three_levels_deep(tmp_path, service):
    messages, spark_runs = [], {}
    for offset, run in enumerate(clickstream_runs()):
        attempt_dir = tmp_path / "runs" / run.id
        hourly = run.job.program.program == "hourly_metrics"
        reads, writes = ("clickstream", "clickstream_hourly_metrics") if hourly else \
                        ("clickstream_hourly_metrics", "clickstream_daily_metrics")
        spark_runs[run.id] = spark_application(run, attempt_dir, True, ([(NS, reads)], [(NS, writes)]))
        messages += lineage_events.run_started(run, T0 + timedelta(minutes=offset))
        messages += lineage_events.run_ended(run, RunState.COMPLETE, T0 + timedelta(minutes=30 + offset), attempt_dir)
    random.Random(7).shuffle(messages)            # children before parents, ends before starts
    for message in messages:
        service.handle_message(message)

    state = service.state
    assert sorted(name for ns, name in state.jobs if ns == NS) == [
        DAILY, f"{DAILY}.daily_metrics", f"{DAILY}.daily_metrics.spark",
        HOURLY, f"{HOURLY}.hourly_metrics", f"{HOURLY}.hourly_metrics.spark"]
    for graph, program in ((HOURLY, "hourly_metrics"), (DAILY, "daily_metrics")):
        schedule_runs = state.runs_of((NS, graph))
        program_runs = state.runs_of((NS, f"{graph}.{program}"))
        spark = state.runs_of((NS, f"{graph}.{program}.spark"))
        assert len(schedule_runs) == len(program_runs) == len(spark) == 3
        assert {r.state for r in [*schedule_runs, *program_runs, *spark]} == {"COMPLETE"}
        assert {r.parent_run_id for r in program_runs} == {r.run_id for r in schedule_runs}
        assert {r.parent_run_id: r.run_id for r in spark} == {r.run_id: spark_runs[r.run_id] for r in program_runs}
        read = dataset_key(NS, "clickstream" if graph == HOURLY else "clickstream_hourly_metrics")
        marketplaces = sorted(dict(p[1])["marketplace"] for r in program_runs for p in r.partitions if p[0] == read)
        assert marketplaces == sorted(MARKETPLACES)
    assert state.datasets_of((NS, f"{DAILY}.daily_metrics.spark")) == (
        (dataset_key(NS, "clickstream_hourly_metrics"),), (dataset_key(NS, "clickstream_daily_metrics"),))
    assert state.jobs_of(dataset_key(NS, "clickstream_hourly_metrics")) == (
        ((NS, f"{DAILY}.daily_metrics"), (NS, f"{DAILY}.daily_metrics.spark")),
        ((NS, f"{HOURLY}.hourly_metrics"), (NS, f"{HOURLY}.hourly_metrics.spark")))
    tree = render_tree(state).splitlines()
    assert f"{DAILY}  [3 runs: 3 COMPLETE]" in tree and f"{HOURLY}  [3 runs: 3 COMPLETE]" in tree
    assert f"       └─ {HOURLY}.hourly_metrics.spark  [3 runs: 3 COMPLETE]" in tree


def test_every_attempts_spark_run_is_forwarded_and_one_that_died_is_aborted(tmp_path, service):
    run = clickstream_runs()[0]
    run_dir = tmp_path / "runs" / run.id
    died = spark_application(run, run_dir, None)                      # attempt 1 was lost mid-run
    retried = spark_application(run, run_dir / "attempt-2", True)
    with events_path(run_dir / "attempt-2" / "result.json").open("a") as file:
        file.write('{"eventType": "COMPLETE", "run": {"ru')           # a line a crash cut short
    ended = T0 + timedelta(hours=1)
    messages = [*lineage_events.run_started(run, T0),
                *lineage_events.run_ended(run, RunState.COMPLETE, ended, run_dir / "attempt-2")]
    for message in messages:
        service.handle_message(message)

    spark = {r.run_id: r for r in service.state.children_of(run.id)}
    assert set(spark) == {died, retried}
    assert (spark[died].state, spark[died].ended_at) == ("ABORT", ended)
    assert spark[retried].state == "COMPLETE"
    assert {r.job_name for r in spark.values()} == {f"{HOURLY}.hourly_metrics.spark"}
    aborted = [json.loads(m) for m in messages if json.loads(m)["run"]["runId"] == died][-1]
    assert aborted["run"]["facets"]["parent"]["run"]["runId"] == run.id


def test_a_lineage_event_that_cannot_be_built_is_reported_and_the_program_carries_on(tmp_path, capsys):
    path = tmp_path / "openlineage.jsonl"
    spark = SparkApplicationLineage(Lineage(run_id="not-a-uuid", job_namespace=NS, job_name="app.s.p",
                                            parent_run_id="nor-this", parent_job_name="app.s"), path)
    spark.started("3.5.1", "local-1")
    spark.finished(True, [], [])
    assert not path.exists() or path.read_text() == ""
    assert capsys.readouterr().err.count("not recorded") == 2
