"""OpenLineage run events folded into a job hierarchy, the same whatever the arrival order.

Pure. Each run keeps what was learnt about it (`RunFacts`), merged by max, min and union only,
so `evolve` is commutative and idempotent; jobs, fully qualified names and run states are
derived from those facts when first asked for.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from functools import cached_property
from typing import Any, Iterable, Mapping

EVENT_TYPES = ("START", "RUNNING", "COMPLETE", "ABORT", "FAIL", "OTHER")
TERMINAL = ("COMPLETE", "ABORT", "FAIL")
UNKNOWN = "UNKNOWN"  # state of a run without START/RUNNING/terminal events (placeholder, or OTHER only)
_RANK = {t: i for i, t in enumerate(("OTHER", "START", "RUNNING", "COMPLETE", "ABORT", "FAIL"))}
# ^ tie-break at equal eventTime: the later stage wins; FAIL over ABORT over COMPLETE
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


class InvalidRunEvent(ValueError):
    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


@dataclass(frozen=True)
class ParentRef:
    run_id: str
    job_namespace: str
    job_name: str


@dataclass(frozen=True)
class RunEventRecord:
    run_id: str                       # lower-case UUID
    event_type: str                   # one of EVENT_TYPES; a missing eventType is OTHER
    event_time: datetime              # aware, UTC
    job_namespace: str
    job_name: str                     # as the producer sent it
    parent: ParentRef | None
    inputs: tuple[str, ...]           # sorted unique "namespace/name"
    outputs: tuple[str, ...]
    run_facets: Mapping[str, Any] = field(default_factory=dict)   # raw, unknown facets included
    job_facets: Mapping[str, Any] = field(default_factory=dict)
    partitions: tuple[str, ...] = ()  # sorted unique "namespace/name:key=value,..." from subset facets

    @property
    def key(self) -> tuple[str, str, datetime]:
        """Deliveries with the same key are duplicates."""
        return (self.run_id, self.event_type, self.event_time)


def parse_run_event(obj: Any) -> RunEventRecord:
    """Validate a decoded OpenLineage 2-0-x RunEvent. Raises InvalidRunEvent naming the field."""
    if not isinstance(obj, dict):
        raise InvalidRunEvent("event", "must be a JSON object")
    run, job = _get(obj, "run", dict), _get(obj, "job", dict)
    run_id = _get(run, "runId", "uuid", "run.runId")
    event_type = "OTHER" if obj.get("eventType") is None else obj["eventType"]
    if event_type not in EVENT_TYPES:
        raise InvalidRunEvent("eventType", f"must be one of {', '.join(EVENT_TYPES)}, got {event_type!r}")
    run_facets, parent = _facets(run, "run.facets"), None
    if run_facets.get("parent"):                              # an empty parent facet means no parent
        p, at = run_facets["parent"], "run.facets.parent"
        p_run, p_job = _get(p, "run", dict, f"{at}.run"), _get(p, "job", dict, f"{at}.job")
        parent = ParentRef(_get(p_run, "runId", "uuid", f"{at}.run.runId"),
                           _get(p_job, "namespace", str, f"{at}.job.namespace"),
                           _get(p_job, "name", str, f"{at}.job.name"))
        if p.get("root") is not None:
            _get(p, "root", dict, f"{at}.root")
        if parent.run_id == run_id:
            raise InvalidRunEvent(f"{at}.run.runId", "a run cannot be its own parent")
    return RunEventRecord(
        run_id=run_id, event_type=event_type, event_time=_get(obj, "eventTime", datetime),
        job_namespace=_get(job, "namespace", str, "job.namespace"), job_name=_get(job, "name", str, "job.name"),
        parent=parent, inputs=_datasets(obj, "inputs"), outputs=_datasets(obj, "outputs"),
        run_facets=run_facets, job_facets=_facets(job, "job.facets"),
        partitions=_partitions(obj, "inputs", "inputFacets", "inputCondition")
        + _partitions(obj, "outputs", "outputFacets", "outputCondition"),
    )


def _get(container: dict, key: str, kind: Any, path: str | None = None) -> Any:
    """container[key] as kind: dict; str (non-empty); "uuid" (lower-cased); datetime (ISO 8601
    with a UTC offset, converted to UTC)."""
    path, value = path or key, container.get(key)
    if value is None:
        raise InvalidRunEvent(path, "is missing")
    if kind is dict:
        if not isinstance(value, dict):
            raise InvalidRunEvent(path, "must be an object")
        return value
    if not isinstance(value, str) or not value.strip():
        raise InvalidRunEvent(path, "must be a non-empty string")
    if kind == "uuid":
        if not _UUID.fullmatch(value):
            raise InvalidRunEvent(path, f"must be a UUID, got {value!r}")
        return value.lower()
    if kind is datetime:
        try:
            parsed = datetime.fromisoformat(value)
            utc = parsed.astimezone(timezone.utc) if parsed.utcoffset() is not None else None
        except (ValueError, OverflowError):
            raise InvalidRunEvent(path, f"must be an ISO 8601 date-time, got {value!r}") from None
        if utc is None:
            raise InvalidRunEvent(path, f"must include a UTC offset, got {value!r}")
        return utc
    return value


def _facets(container: dict, path: str) -> dict[str, Any]:
    facets = container.get("facets") or {}
    if not isinstance(facets, dict):
        raise InvalidRunEvent(path, "must be an object")
    for name, facet in facets.items():
        if not isinstance(facet, dict):
            raise InvalidRunEvent(f"{path}.{name}", "must be an object")
    return facets


def _datasets(obj: dict, key: str) -> tuple[str, ...]:
    items = obj.get(key) or []
    if not isinstance(items, list):
        raise InvalidRunEvent(key, "must be a list")
    names = set()
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise InvalidRunEvent(f"{key}[{i}]", "must be an object")
        names.add(f"{_get(item, 'namespace', str, f'{key}[{i}].namespace')}/{_get(item, 'name', str, f'{key}[{i}].name')}")
    return tuple(sorted(names))


def _partitions(obj: dict, key: str, facets_key: str, condition_key: str) -> tuple[str, ...]:
    """The partitions a run read or wrote, from the datasets' subset facets with a partition
    condition: so the runs of one job over different partitions (one per marketplace, say) stay
    runs of one job. Other subset conditions are kept as facets only."""
    found = set()
    for i, item in enumerate(obj.get(key) or []):
        facets = item.get(facets_key) or {}
        subset = facets.get("subset") if isinstance(facets, dict) else None
        condition = subset.get(condition_key) if isinstance(subset, dict) else None
        if not isinstance(condition, dict) or condition.get("type") != "partition":
            continue
        at = f"{key}[{i}].{facets_key}.subset.{condition_key}.partitions"
        partitions = condition.get("partitions")
        if not isinstance(partitions, list):
            raise InvalidRunEvent(at, "must be a list")
        for j, partition in enumerate(partitions):
            dimensions = partition.get("dimensions") if isinstance(partition, dict) else None
            if not isinstance(dimensions, dict):
                raise InvalidRunEvent(f"{at}[{j}].dimensions", "must be an object")
            keys = ",".join(f"{k}={dimensions[k]}" for k in sorted(dimensions))
            found.add(f"{item['namespace']}/{item['name']}:{keys}")
    return tuple(sorted(found))


# -- state ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Job:
    namespace: str
    name: str                         # fully qualified: parent names joined by '.'
    simple_name: str
    parent_job_name: str | None
    parent_job_namespace: str | None = None


@dataclass(frozen=True)
class Run:
    run_id: str
    job_namespace: str
    job_name: str                     # fully qualified
    state: str                        # START, RUNNING, COMPLETE, FAIL, ABORT or UNKNOWN
    parent_run_id: str | None
    started_at: datetime | None
    ended_at: datetime | None
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    last_event_time: datetime | None  # None: a placeholder, known only as a parent
    partitions: tuple[str, ...] = ()  # "namespace/name:key=value,..." it read or wrote


@dataclass(frozen=True)
class RunFacts:
    """What is known about one run; every field merges by max, min or union."""

    run_id: str
    job: tuple | None = None                  # max (time, rank, namespace, name) of its own events
    claims: frozenset = frozenset()           # {(namespace, name)} its children's parent facets give
    parent: tuple | None = None               # max (time, rank, run id, namespace, name)
    terminal: tuple | None = None             # max (time, rank, type) of COMPLETE/ABORT/FAIL
    progress: tuple | None = None             # max (time, rank, type) of START/RUNNING
    first_start: datetime | None = None
    first_seen: datetime | None = None
    last_seen: datetime | None = None
    inputs: frozenset = frozenset()
    outputs: frozenset = frozenset()
    partitions: frozenset = frozenset()
    seen: frozenset = frozenset()             # {(type, time)} of its events

    def absorb(self, r: RunEventRecord) -> RunFacts:
        t, rank, p = r.event_time, _RANK[r.event_type], r.parent
        return replace(
            self,
            job=_max(self.job, (t, rank, r.job_namespace, r.job_name)),
            parent=_max(self.parent, p and (t, rank, p.run_id, p.job_namespace, p.job_name)),
            terminal=_max(self.terminal, (t, rank, r.event_type) if r.event_type in TERMINAL else None),
            progress=_max(self.progress, (t, rank, r.event_type) if r.event_type in ("START", "RUNNING") else None),
            first_start=_min(self.first_start, t if r.event_type == "START" else None),
            first_seen=_min(self.first_seen, t),
            last_seen=_max(self.last_seen, t),
            inputs=self.inputs | set(r.inputs),
            outputs=self.outputs | set(r.outputs),
            partitions=self.partitions | set(r.partitions),
            seen=self.seen | {(r.event_type, t)},
        )


def _max(a: Any, b: Any) -> Any:
    return a if b is None else b if a is None else max(a, b)


def _min(a: Any, b: Any) -> Any:
    return a if b is None else b if a is None else min(a, b)


@dataclass(frozen=True)
class LineageState:
    facts: Mapping[str, RunFacts] = field(default_factory=dict)   # by run id; never mutated

    def has_seen(self, record: RunEventRecord) -> bool:
        f = self.facts.get(record.run_id)
        return f is not None and (record.event_type, record.event_time) in f.seen

    @cached_property
    def _derived(self) -> tuple[dict[tuple[str, str], Job], dict[str, Run]]:
        return _derive(self.facts)

    @property
    def jobs(self) -> Mapping[tuple[str, str], Job]:
        """By (namespace, fully qualified name)."""
        return self._derived[0]

    @property
    def runs(self) -> Mapping[str, Run]:
        return self._derived[1]


EMPTY = LineageState()


def evolve(state: LineageState, record: RunEventRecord) -> LineageState:
    facts = dict(state.facts)
    _apply(facts, record)
    return state if facts == state.facts else LineageState(facts)


def fold(records: Iterable[RunEventRecord], state: LineageState = EMPTY) -> LineageState:
    """evolve over many records without copying the state for each."""
    facts = dict(state.facts)
    for record in records:
        _apply(facts, record)
    return LineageState(facts)


def _apply(facts: dict[str, RunFacts], r: RunEventRecord) -> None:
    facts[r.run_id] = facts.get(r.run_id, RunFacts(r.run_id)).absorb(r)
    if r.parent:                                              # the parent exists, maybe as a placeholder
        p = facts.get(r.parent.run_id, RunFacts(r.parent.run_id))
        facts[r.parent.run_id] = replace(p, claims=p.claims | {(r.parent.job_namespace, r.parent.job_name)})


def _derive(facts: Mapping[str, RunFacts]) -> tuple[dict[tuple[str, str], Job], dict[str, Run]]:
    named: dict[str, Job] = {}                                # run id -> its job
    for run_id in sorted(facts):
        chain, cur = [], run_id
        while cur in facts and cur not in named and cur not in chain:
            chain.append(cur)
            cur = facts[cur].parent[2] if facts[cur].parent else None
        above = named.get(cur)                                # None at a root; a cycle is cut at its top
        for rid in reversed(chain):
            named[rid] = above = _job_of(facts[rid], above)
    jobs: dict[tuple[str, str], Job] = {}                     # runs may disagree: pick deterministically
    for job in sorted(named.values(), key=lambda j: (j.parent_job_name is None, j.parent_job_name or "",
                                                      j.parent_job_namespace or "", j.simple_name)):
        jobs.setdefault((job.namespace, job.name), job)
    return dict(sorted(jobs.items())), {rid: _run_of(facts[rid], named[rid]) for rid in sorted(facts)}


def _job_of(f: RunFacts, parent_job: Job | None) -> Job:
    namespace, given = f.job[2:] if f.job else min(f.claims)
    if parent_job is None:
        return Job(namespace, given, given, None)
    simple = given                                            # unless the producer already qualified it
    for prefix in (parent_job.name + ".", f.parent[4] + "."):
        if given.startswith(prefix) and len(given) > len(prefix):
            simple = given[len(prefix):]
            break
    return Job(namespace, f"{parent_job.name}.{simple}", simple, parent_job.name, parent_job.namespace)


def _run_of(f: RunFacts, job: Job) -> Run:
    chosen = f.terminal or f.progress
    return Run(run_id=f.run_id, job_namespace=job.namespace, job_name=job.name,
               state=chosen[2] if chosen else UNKNOWN, parent_run_id=f.parent[2] if f.parent else None,
               started_at=f.first_start or f.first_seen, ended_at=f.terminal[0] if f.terminal else None,
               inputs=tuple(sorted(f.inputs)), outputs=tuple(sorted(f.outputs)), last_event_time=f.last_seen,
               partitions=tuple(sorted(f.partitions)))


# -- rendering --------------------------------------------------------------------------------

def render_tree(state: LineageState, namespace: str | None = None, max_runs: int = 5) -> str:
    """The job hierarchy as an indented tree; each job with its latest runs (id tail, state, duration)."""
    jobs = {k: j for k, j in state.jobs.items() if namespace is None or j.namespace == namespace}
    if not jobs:
        return "(no lineage)" if namespace is None else f"(no lineage in namespace {namespace})"
    children: dict[Any, list[tuple[str, str]]] = {}
    for key, job in jobs.items():
        parent = (job.parent_job_namespace, job.parent_job_name)
        children.setdefault(parent if parent in jobs else None, []).append(key)
    runs: dict[tuple[str, str], list[Run]] = {}
    for run in sorted(state.runs.values(), key=_run_order):
        runs.setdefault((run.job_namespace, run.job_name), []).append(run)
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
