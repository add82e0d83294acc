"""Plain-text tables and trees for the CLI and the demo."""
from __future__ import annotations

from collections import Counter, defaultdict
from datetime import datetime, timezone
from typing import Sequence

from google.protobuf import timestamp_pb2

from sluice.v1 import lineage_pb2


_ESCAPED = {code: f"\\x{code:02x}" for code in (*range(0x20), *range(0x7F, 0xA0))}


def printable(text: str) -> str:
    """`text` with its control characters written as \\xNN: what came off the bus or an API (a dead
    letter's headers, a name) never moves the cursor, clears the screen or sets the clipboard."""
    return text.translate(_ESCAPED)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[printable(str(c)) for c in headers], *[[printable(str(c)) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def when(stamp: timestamp_pb2.Timestamp) -> str:
    if not stamp.seconds and not stamp.nanos:
        return "-"
    return stamp.ToDatetime(tzinfo=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def duration(start: timestamp_pb2.Timestamp, end: timestamp_pb2.Timestamp) -> str:
    if not end.seconds or not start.seconds:
        return "-"
    seconds = (end.ToDatetime() - start.ToDatetime()).total_seconds()
    return f"{seconds:.1f}s"


def pairs(mapping) -> str:
    return ",".join(f"{k}={v}" for k, v in mapping.items()) or "-"


def key_text(key) -> str:
    """A protobuf partition key (repeated KeyValue) as k=v,k=v in key order."""
    return ",".join(f"{kv.name}={kv.value}" for kv in key) or "-"


def lineage_subtree(jobs: Sequence[lineage_pb2.LineageJob], name: str) -> list[lineage_pb2.LineageJob]:
    """The jobs named `name` (fully qualified, else simple: the last part) and every job under them."""
    chosen = [job for job in jobs if job.name == name] or [job for job in jobs if job.simple_name == name]
    below: dict[str, list[lineage_pb2.LineageJob]] = defaultdict(list)
    for job in jobs:
        below[job.parent_job_name].append(job)
    found, stack = {}, list(chosen)
    while stack:
        job = stack.pop()
        if (job.namespace, job.name) not in found:
            found[(job.namespace, job.name)] = job
            stack.extend(below[job.name])
    return list(found.values())


def lineage_tree(jobs: Sequence[lineage_pb2.LineageJob], runs: Sequence[lineage_pb2.LineageRun]) -> str:
    """The job hierarchy (parent jobs above their children) with each job's runs summarized."""
    children: dict[str, list[lineage_pb2.LineageJob]] = defaultdict(list)
    names = {job.name for job in jobs}
    for job in jobs:      # a job whose parent is not shown heads a tree
        children[job.parent_job_name if job.parent_job_name in names else ""].append(job)
    runs_by_job: dict[tuple[str, str], list[lineage_pb2.LineageRun]] = defaultdict(list)
    for run in runs:
        runs_by_job[(run.job_namespace, run.job_name)].append(run)
    lines: list[str] = []

    def walk(job: lineage_pb2.LineageJob, depth: int) -> None:
        job_runs = runs_by_job[(job.namespace, job.name)]
        states = Counter(run.state for run in job_runs)
        summary = ", ".join(f"{count} {state}" for state, count in sorted(states.items()))
        prefix = "  " * (depth - 1) + "└─ " if depth else ""
        lines.append(f"{prefix}{job.namespace}:{job.name}  [{len(job_runs)} runs: {summary or 'none'}]")
        for run in sorted(job_runs, key=lambda r: (r.started_at.seconds, r.run_id)):
            parent = f" parent={run.parent_run_id[:8]}" if run.parent_run_id else ""
            lines.append(f"{'  ' * depth}     run {run.run_id[:8]} {run.state}{parent}"
                         f" {duration(run.started_at, run.ended_at)}")
        for child in sorted(children[job.name], key=lambda j: j.name):
            walk(child, depth + 1)

    for root in sorted(children[""], key=lambda j: (j.namespace, j.name)):
        walk(root, 0)
    return "\n".join(lines)


def utc(dt: datetime) -> str:
    return dt.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
