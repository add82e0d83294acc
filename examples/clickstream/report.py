"""What each run of the demo really consumed, for its runs table: the partitions its partition
consumer handed it and it completed (the consumer's history names the run that took each), their
records, and the rows it wrote; beside the partitions its trigger brought (its job's notifications,
those of the jobs that joined it included)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterable, Mapping

from sluice.cli import render
from sluice.v1 import jobs_pb2, notifications_pb2, runs_pb2
from sluice_examples.clickstream import app

HOURLY_CONSUMER = f"{app.APP}_{app.HOURLY_METRICS.program}"
"""The hourly program's consumer of the clickstream dataset (the SDK names it after app and program)."""

HEADER = ("RUN", "JOB", "STATUS", "DURATION", "TRIGGERED BY", "CONSUMED", "ROWS IN", "ROWS OUT")


def key_text(key: Mapping[str, str]) -> str:
    return "/".join(key.values())


def consumed_by_run(consumer_json: str) -> dict[str, list[dict[str, str]]]:
    """Run id -> the keys of the partitions it took and completed, in the order it took them, from a
    consumer's state (Partitions.GetConsumer's json)."""
    taken: dict[str, list[dict[str, str]]] = {}
    for record in json.loads(consumer_json)["history"]:
        if record["outcome"] == "COMPLETED":
            taken.setdefault(record["taken_by"], []).append(record["key"])
    return taken


def triggered_by(job: jobs_pb2.Job | None) -> list[dict[str, str]]:
    if job is None:
        return []
    return [{kv.name: kv.value for kv in p.key} for n in job.context.notifications
            if n.HasField("partition_committed") for p in n.partition_committed.partitions]


@dataclass(frozen=True)
class RunLine:
    run_id: str
    job_id: str
    status: str
    duration: str
    triggered_by: tuple[str, ...]
    consumed: tuple[str, ...]
    rows_in: int
    rows_out: int

    def row(self) -> tuple:
        return (self.run_id[:8], self.job_id[:8], self.status, self.duration, _listed(self.triggered_by),
                _listed(self.consumed), self.rows_in, self.rows_out)


def run_lines(runs: Iterable[runs_pb2.Run], jobs: Mapping[str, jobs_pb2.Job],
              consumed: Mapping[str, list[dict[str, str]]], records: Mapping[tuple[str, ...], int]) -> list[RunLine]:
    """One line per run: `jobs` by id, `consumed` by run id (consumed_by_run), `records`: each input
    partition's record count by its key's values."""
    lines = []
    for run in runs:
        taken = consumed.get(run.id, [])
        lines.append(RunLine(
            run.id, run.job_id, notifications_pb2.RunStatus.Name(run.status), render.duration(run.started_at, run.ended_at),
            tuple(key_text(k) for k in triggered_by(jobs.get(run.job_id))), tuple(key_text(k) for k in taken),
            sum(records.get(tuple(k.values()), 0) for k in taken), sum(o.partition.record_count for o in run.outputs)))
    return lines


def _listed(keys: tuple[str, ...]) -> str:
    return f"{len(keys)}: {' '.join(keys)}" if keys else "0"


def print_jobs(jobs: Iterable[jobs_pb2.Job], schedule_names: Mapping[str, str]) -> None:
    print("\n== Jobs (a partition committed while a run goes joins the job waiting for the next run; "
          "the daily ones wait for 24 hours of their marketplace, or 02:00 local time)")
    print(render.table(("JOB", "SCHEDULE", "STATE", "CREATED", "UPDATED", "REASON"),
                       [(j.id[:8], schedule_names.get(j.schedule_id, j.schedule_id[:8]), jobs_pb2.JobState.Name(j.state),
                         render.when(j.created_at), render.when(j.updated_at), j.reason or "-") for j in jobs]))
