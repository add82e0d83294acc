"""The context.json handed to a program (read by sluice.sdk.context on the program's side)."""
from __future__ import annotations

import errno
import json
import os
import stat
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


class LeftByAProgram(Exception):
    """A path of an attempt's directory is not what the launcher makes there (a link, a FIFO, a file for a
    directory): a program that owned the directory before left it."""


LEFT_BY_A_PROGRAM = (errno.ELOOP, errno.ENOTDIR, errno.ENXIO)
"""What opening such a path without following links, without waiting, raises."""


def opened_as_made(path: Path, flags: int, mode: int = 0o600, kind: int = stat.S_IFREG) -> int:
    """`path` opened not through a link and never waiting (O_NONBLOCK: a FIFO), checked to be of `kind`;
    LeftByAProgram when it is something else."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK, mode)
    except OSError as error:
        if error.errno in LEFT_BY_A_PROGRAM:
            raise LeftByAProgram(f"{path} is not what the launcher made there: {error.strerror}") from None
        raise
    if stat.S_IFMT(os.fstat(fd).st_mode) != kind:
        os.close(fd)
        raise LeftByAProgram(f"{path} is not what the launcher made there")
    os.set_blocking(fd, True)
    return fd


def private_dir(path: Path) -> Path:
    """`path` made (with its missing parents) and left readable by its owner only (0700), never through a
    link (a later attempt's directory is in the first one's, which its program may own)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = opened_as_made(path, os.O_RDONLY | os.O_DIRECTORY, kind=stat.S_IFDIR)
    try:
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)
    return path


def write_context(path: Path, context: dict) -> None:
    """context.json, readable by its owner only (0600) from its first byte on: it holds the run's credential."""
    fd = opened_as_made(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        os.fchmod(handle.fileno(), 0o600)   # written before by another attempt of the launcher: mode kept
        json.dump(context, handle, indent=2)
