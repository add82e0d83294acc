"""The lineage job hierarchy as text (`sluice lineage show`, logs)."""
from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sluice.domain.lineage import LineageState, Run

def render_tree(state: LineageState, namespace: str | None = None, max_runs: int = 5) -> str:
    """The job hierarchy as an indented tree; each job with its latest runs (id tail, state, duration)."""
    jobs = {k: j for k, j in state.jobs.items() if namespace is None or j.namespace == namespace}
    if not jobs:
        return "(no lineage)" if namespace is None else f"(no lineage in namespace {namespace})"
    children: dict[Any, list[tuple[str, str]]] = {}
    for key, job in jobs.items():
        parent = (job.parent_job_namespace, job.parent_job_name)
        children.setdefault(parent if parent in jobs else None, []).append(key)
    runs = {key: sorted(state.runs_of(key), key=_run_order) for key in jobs}
    lines: list[str] = []

    def walk(key: tuple[str, str], head: str, body: str, parent_ns: str | None) -> None:
        job, job_runs = jobs[key], runs.get(key, [])
        summary = ", ".join(f"{n} {s}" for s, n in sorted(Counter(r.state for r in job_runs).items()))
        ns = f"  (namespace {job.namespace})" if parent_ns not in (None, job.namespace) else ""
        lines.append(f"{head}{job.name}{ns}  [{len(job_runs)} run{'s' * (len(job_runs) != 1)}: {summary}]")
        if len(job_runs) > max_runs:
            lines.append(f"{body}  · ... {len(job_runs) - max_runs} earlier")
        for run in job_runs[-max_runs:] if max_runs else ():
            lines.append(f"{body}  · run ..{run.run_id[-8:]}  {run.state:<8}  {_duration(run)}")
        kids = children.get(key, [])
        for i, kid in enumerate(kids):
            last = i == len(kids) - 1
            walk(kid, body + ("  └─ " if last else "  ├─ "), body + ("     " if last else "  │  "), job.namespace)

    roots = children.get(None, [])
    namespaces = sorted({ns for ns, _ in roots})
    for ns in namespaces:
        if len(namespaces) > 1:
            lines.append(f"[namespace {ns}]")
        for key in (k for k in roots if k[0] == ns):
            walk(key, "", "", None)
    return "\n".join(lines)


def _run_order(run: Run) -> tuple:
    return (run.started_at is not None, run.started_at or datetime.min.replace(tzinfo=timezone.utc), run.run_id)


def _duration(run: Run) -> str:
    if run.started_at is None or run.ended_at is None:
        return "running" if run.state in ("START", "RUNNING") else "-"
    seconds = (run.ended_at - run.started_at).total_seconds()
    minutes, hours = int(seconds // 60), int(seconds // 3600)
    return f"{seconds:.1f}s" if seconds < 60 else f"{minutes}m{int(seconds % 60):02d}s" if hours < 1 else f"{hours}h{minutes % 60:02d}m"
