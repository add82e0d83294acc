"""The context.json handed to a program (read by sluice.sdk.context on the program's side)."""
from __future__ import annotations

import json
import os
from pathlib import Path

from sluice.domain.common import PartitionCommitted, ProgramStatusChanged
from sluice.domain.jobs import Job


LINEAGE_JOB_PROPERTY = "sluice.lineage.job"
"""A schedule property naming its runs' lineage job instead of the schedule's name: schedules that
run one workflow once per marketplace (each in its own zone) then make one job graph, their runs
told apart by their partitions (seed 002), not one copy of the graph per schedule."""


def schedule_job_name(job: Job) -> str:
    """The OpenLineage job of the schedule's run: the parent of the program's run."""
    return f"{job.program.app}.{job.context.properties.get(LINEAGE_JOB_PROPERTY) or job.context.schedule_name}"


def program_job_name(job: Job) -> str:
    return f"{schedule_job_name(job)}.{job.program.program}"


def build_context(run_id: str, job: Job, data_dir: Path, run_dir: Path, attempt: int = 1) -> dict:
    context = job.context
    return {
        "run_id": run_id,
        "job_id": job.id,
        "schedule": {"id": job.schedule_id, "name": context.schedule_name, "generation": job.schedule_generation},
        "program": {"namespace": job.program.namespace, "app": job.program.app, "program": job.program.program},
        "properties": dict(context.properties),
        "system": {
            "logical_time": context.logical_time.isoformat() if context.logical_time else None,
            "data_dir": str(data_dir.resolve()),
            "staging_dir": str((run_dir / "staging").resolve()),
            "result_path": str((run_dir / "result.json").resolve()),
            "attempt": attempt,
        },
        "notifications": [_notification(n) for n in context.notifications],
        "lineage": {
            "run_id": run_id,
            "job_namespace": job.program.namespace,
            "job_name": program_job_name(job),
            "parent_run_id": job.id,
            "parent_job_name": schedule_job_name(job),
        },
    }


def _notification(notification) -> dict:
    payload = notification.payload
    base = {"id": notification.id, "time": notification.time.isoformat()}
    if isinstance(payload, PartitionCommitted):
        return {**base, "type": "partition_committed", "namespace": payload.namespace, "dataset": payload.dataset,
                "partitions": [{"key": dict(p.key), "location": p.location, "size_bytes": p.size_bytes,
                                "record_count": p.record_count, "metadata": dict(p.metadata)}
                               for p in payload.partitions]}
    assert isinstance(payload, ProgramStatusChanged)
    program = payload.program
    return {**base, "type": "program_status_changed", "run_id": payload.run_id, "status": payload.status.value,
            "program": {"namespace": program.namespace, "app": program.app, "program": program.program}}


def private_dir(path: Path) -> Path:
    """`path` made (with its missing parents) and left readable by its owner only (0700)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def write_context(path: Path, context: dict) -> None:
    """context.json, readable by its owner only (0600) from its first byte on: it holds the run's credential."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        os.fchmod(handle.fileno(), 0o600)   # written before by another attempt of the launcher: mode kept
        json.dump(context, handle, indent=2)
