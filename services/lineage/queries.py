"""Queries on the lineage projection shared by its HTTP and gRPC edges: a job by fully qualified or
simple name, the graph of jobs and datasets around a node, and the sort keys of its paged listings."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sluice.clock import epoch_micros
from sluice.domain.lineage import DatasetKey, Job, LineageState, Run, dataset_key, dataset_of
from sluice_services.lineage.marquez import dataset_json, dataset_span, home_namespace, job_json

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


def dataset_text(key: DatasetKey) -> str:
    """A dataset as one string for a human or a string field: "namespace/name" (not to be split again)."""
    namespace, name = dataset_of(key)
    return f"{namespace}/{name}"


Node = tuple[str, Any]   # ("job", (namespace, name)) or ("dataset", dataset_key(namespace, name))


class Graph:
    """Jobs and datasets as nodes; a job's runs read its inputs and wrote its outputs. Walks the
    state's maintained edges out from the start node, so a query costs the size of its answer.
    A job's node id and data name the namespace it lives in (seed 002: its root ancestor's), as
    the Marquez paths do; the nodes' data are Marquez's Job and Dataset."""

    def __init__(self, state: LineageState) -> None:
        self._state = state
        self._memo = _memo_of(state)

    def find(self, node_id: str) -> Node | None:
        """The node a nodeId names (a job under its own namespace or the one it lives in), None if
        there is none. A namespace may contain ':' (s3://...)."""
        kind, _, rest = node_id.partition(":")
        for at in (i for i, c in enumerate(rest) if c == ":"):
            namespace, name = rest[:at], rest[at + 1:]
            if kind == "job" and (namespace, name) in self._state.jobs:
                return "job", (namespace, name)
            if kind == "job" and (living := self._living().get((namespace, name))):
                return "job", living
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
        ids = {node: self.node_id(node) for node in edges}
        ids.update((end, self.node_id(end)) for links in edges.values() for edge in links for end in edge
                   if end not in ids)
        for node in sorted(edges, key=ids.__getitem__):
            me, links = ids[node], sorted((ids[o], ids[d]) for o, d in edges[node])
            rendered.append({"id": me, **self._data(node),
                             "inEdges": [{"origin": o, "destination": d} for o, d in links if d == me],
                             "outEdges": [{"origin": o, "destination": d} for o, d in links if o == me]})
        return rendered

    def _living(self) -> dict[tuple[str, str], tuple[str, str]]:
        """(home namespace, name) -> the least key of the jobs living there, once per state."""
        living = self._memo.get(_LIVING)
        if living is None:
            living = {}
            for key in sorted(self._state.jobs, reverse=True):
                living[(self._home(key), key[1])] = key
            self._memo[_LIVING] = living
        return living

    def _home(self, key: tuple[str, str]) -> str:
        home = self._memo.get(("home", key))
        if home is None:
            home = self._memo[("home", key)] = home_namespace(self._state, self._state.jobs[key])
        return home

    def _data(self, node: Node) -> dict[str, Any]:
        data = self._memo.get(("data", node))
        if data is None:
            kind, key = node
            if kind == "job":
                data = {"type": "JOB", "data": job_json(self._state, self._state.jobs[key], home=self._home(key))}
            else:
                data = {"type": "DATASET", "data": dataset_json(key, dataset_span(self._state, key).pair)}
            self._memo[("data", node)] = data
        return data

    def node_id(self, node: Node) -> str:
        kind, key = node
        if kind == "job":
            return f"job:{self._home(key)}:{key[1]}"
        namespace, name = dataset_of(key)
        return f"dataset:{namespace}:{name}"


_LIVING = ("living",)
_MEMO_LIMIT = 200_000
_memo: tuple[LineageState | None, dict] = (None, {})


def _memo_of(state: LineageState) -> dict:
    """What the graphs of one state computed (home namespaces, node data), shared by the queries on
    it until the state changes: the Marquez fields cost more than the walk. Read-only once stored."""
    global _memo
    held, memo = _memo
    if held is not state or len(memo) > _MEMO_LIMIT:
        _memo = (state, memo := {})
    return memo


def run_order(run: Run) -> tuple[bool, int, str]:
    """Oldest first by start (microseconds since the epoch); runs not started yet last; then by id."""
    if run.started_at is None:
        return True, 0, run.run_id
    return False, epoch_micros(run.started_at), run.run_id


def job_order(job: Job) -> tuple[str, str]:
    return job.namespace, job.name
