"""Queries on the lineage projection shared by its HTTP and gRPC edges: a job by fully qualified or
simple name, the graph of jobs and datasets around a node, and the sort keys of its paged listings."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sluice.clock import epoch_micros
from sluice.domain.lineage import DatasetKey, Job, LineageState, Partition, Run, dataset_key, dataset_of

DEFAULT_DEPTH = 20
MAX_DEPTH = 100
"""The deepest lineage graph a caller may ask for."""


@dataclass(frozen=True)
class JobLookup:
    """What a namespace and name denote: the job (`resolved` when found by its simple name), or
    the candidates' fully qualified names when several jobs share that simple name, or nothing."""
    job: Job | None = None
    resolved: bool = False
    candidates: tuple[str, ...] = ()


def find_job(state: LineageState, namespace: str, name: str) -> JobLookup:
    """The job by fully qualified name; else the one job with this simple name, or the candidates."""
    jobs = state.jobs
    if (namespace, name) in jobs:
        return JobLookup(jobs[(namespace, name)])
    candidates = tuple(sorted(job.name for (ns, _), job in jobs.items() if ns == namespace and job.simple_name == name))
    if len(candidates) == 1:
        return JobLookup(jobs[(namespace, candidates[0])], resolved=True)
    return JobLookup(candidates=candidates if len(candidates) > 1 else ())


def job_json(state: LineageState, job: Job) -> dict[str, Any]:
    inputs, outputs = state.datasets_of(job.key)
    latest = state.latest_run(job.key)
    return {
        "id": {"namespace": job.namespace, "name": job.name},
        "type": "BATCH",
        "name": job.name,
        "simpleName": job.simple_name,
        "parentJobName": job.parent_job_name,
        "namespace": job.namespace,
        "inputs": [_dataset_id(d) for d in inputs],
        "outputs": [_dataset_id(d) for d in outputs],
        "latestRun": run_json(latest) if latest else None,
    }


def run_json(run: Run) -> dict[str, Any]:
    return {
        "id": run.run_id,
        "state": run.state,
        "jobName": run.job_name,
        "jobNamespace": run.job_namespace,
        "parentRunId": run.parent_run_id,
        "startedAt": run.started_at.isoformat() if run.started_at else None,
        "endedAt": run.ended_at.isoformat() if run.ended_at else None,
        "inputs": [_dataset_id(d) for d in run.inputs],
        "outputs": [_dataset_id(d) for d in run.outputs],
        "partitions": [_partition_json(p) for p in run.partitions],
    }


def _partition_json(partition: Partition) -> dict[str, Any]:
    dataset, dimensions = partition
    return {**_dataset_id(dataset), "dimensions": dict(dimensions)}


def _dataset_id(key: DatasetKey) -> dict[str, str]:
    namespace, name = dataset_of(key)
    return {"namespace": namespace, "name": name}


def dataset_text(key: DatasetKey) -> str:
    """A dataset as one string for a human or a string field: "namespace/name" (not to be split again)."""
    namespace, name = dataset_of(key)
    return f"{namespace}/{name}"


Node = tuple[str, Any]   # ("job", (namespace, name)) or ("dataset", dataset_key(namespace, name))


class Graph:
    """Jobs and datasets as nodes; a job's runs read its inputs and wrote its outputs. Walks the
    state's maintained edges out from the start node, so a query costs the size of its answer."""

    def __init__(self, state: LineageState) -> None:
        self._state = state

    def find(self, node_id: str) -> Node | None:
        """The node a nodeId names, None if there is none. A namespace may contain ':' (s3://...)."""
        kind, _, rest = node_id.partition(":")
        for at in (i for i, c in enumerate(rest) if c == ":"):
            namespace, name = rest[:at], rest[at + 1:]
            if kind == "job" and (namespace, name) in self._state.jobs:
                return "job", (namespace, name)
            if kind == "dataset":
                try:
                    key = dataset_key(namespace, name)
                except ValueError:                            # no recorded dataset has the separator
                    continue
                if any(self._state.jobs_of(key)):
                    return "dataset", key
        return None

    def _edges(self, node: Node) -> list[tuple[Node, Node]]:
        kind, key = node
        if kind == "job":
            inputs, outputs = self._state.datasets_of(key)
            return [(("dataset", d), node) for d in inputs] + [(node, ("dataset", d)) for d in outputs]
        readers, writers = self._state.jobs_of(key)
        return [(node, ("job", j)) for j in readers] + [(("job", j), node) for j in writers]

    def around(self, start: Node, depth: int) -> list[dict[str, Any]]:
        edges = {start: self._edges(start)}
        frontier = [start]
        for _ in range(depth):
            reached = []
            for node in frontier:
                for other in (end for edge in edges[node] for end in edge if end not in edges):
                    edges[other] = self._edges(other)
                    reached.append(other)
            if not (frontier := reached):
                break
        rendered = []
        for node in sorted(edges, key=node_id):
            me, links = node_id(node), sorted((node_id(o), node_id(d)) for o, d in edges[node])
            rendered.append({"id": me, **self._data(node),
                             "inEdges": [{"origin": o, "destination": d} for o, d in links if d == me],
                             "outEdges": [{"origin": o, "destination": d} for o, d in links if o == me]})
        return rendered

    def _data(self, node: Node) -> dict[str, Any]:
        kind, key = node
        if kind == "job":
            return {"type": "JOB", "data": job_json(self._state, self._state.jobs[key])}
        return {"type": "DATASET", "data": _dataset_id(key)}


def node_id(node: Node) -> str:
    kind, key = node
    if kind == "job":
        return f"job:{key[0]}:{key[1]}"
    namespace, name = dataset_of(key)
    return f"dataset:{namespace}:{name}"


def run_order(run: Run) -> tuple[bool, int, str]:
    """Oldest first by start (microseconds since the epoch); runs not started yet last; then by id."""
    if run.started_at is None:
        return True, 0, run.run_id
    return False, epoch_micros(run.started_at), run.run_id


def job_order(job: Job) -> tuple[str, str]:
    return job.namespace, job.name
