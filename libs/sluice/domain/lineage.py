"""OpenLineage run events folded into a job hierarchy, the same whatever the arrival order.

Pure. Each run keeps what was learnt about it (`RunFacts`), merged by max, min and union only,
so `evolve` is commutative and idempotent; jobs, fully qualified names, run states and dataset
edges are functions of those facts, kept up to date event by event (sluice.domain.lineage_index).
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from sys import intern
from types import MappingProxyType
from typing import Any

from sluice.ids import UUID
from sluice.domain.lineage_index import Job, JobKey, LineageIndex

EVENT_TYPES = ("START", "RUNNING", "COMPLETE", "ABORT", "FAIL", "OTHER")
TERMINAL = ("COMPLETE", "ABORT", "FAIL")
UNKNOWN = "UNKNOWN"  # state of a run without START/RUNNING/terminal events (placeholder, or OTHER only)
_RANK = {t: i for i, t in enumerate(("OTHER", "START", "RUNNING", "COMPLETE", "ABORT", "FAIL"))}
# ^ tie-break at equal eventTime: the later stage wins; FAIL over ABORT over COMPLETE
# -- dataset identity ---------------------------------------------------------------------------
# A dataset is a (namespace, name) pair; OpenLineage namespaces are URIs (s3://bucket,
# postgres://host:5432) and names paths (warehouse/clicks), so "/" or ":" cannot join them. In
# memory a dataset is one interned string, the two joined by the unit separator, which no
# recorded dataset contains (parse_run_event refuses control characters in both): build and
# split it with these two functions only.

DATASET_SEPARATOR = "\x1f"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

DatasetKey = str
Partition = tuple[DatasetKey, tuple[tuple[str, str], ...]]
"""A partition a run read or wrote: its dataset and its (dimension, value) pairs sorted by dimension."""


def dataset_key(namespace: str, name: str) -> DatasetKey:
    """The in-memory key of a dataset; ValueError if either part contains the separator."""
    if DATASET_SEPARATOR in namespace or DATASET_SEPARATOR in name:
        raise ValueError(f"a dataset namespace or name cannot contain {DATASET_SEPARATOR!r}: {namespace!r}, {name!r}")
    return intern(f"{namespace}{DATASET_SEPARATOR}{name}")


def dataset_of(key: DatasetKey) -> tuple[str, str]:
    """(namespace, name) of a key made by dataset_key."""
    namespace, _, name = key.partition(DATASET_SEPARATOR)
    return namespace, name


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
    inputs: tuple[DatasetKey, ...]    # sorted unique dataset_key(namespace, name)
    outputs: tuple[DatasetKey, ...]
    run_facets: Mapping[str, Any] = field(default_factory=dict)   # raw, unknown facets included
    job_facets: Mapping[str, Any] = field(default_factory=dict)
    partitions: tuple[Partition, ...] = ()  # sorted unique, from the subset facets

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
                           intern(_get(p_job, "namespace", str, f"{at}.job.namespace")),
                           intern(_get(p_job, "name", str, f"{at}.job.name")))
        if p.get("root") is not None:
            _get(p, "root", dict, f"{at}.root")
        if parent.run_id == run_id:
            raise InvalidRunEvent(f"{at}.run.runId", "a run cannot be its own parent")
    return RunEventRecord(
        run_id=run_id, event_type=event_type, event_time=_get(obj, "eventTime", datetime),
        job_namespace=intern(_get(job, "namespace", str, "job.namespace")),
        job_name=intern(_get(job, "name", str, "job.name")),
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
        if not UUID.fullmatch(value):
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


def _datasets(obj: dict, key: str) -> tuple[DatasetKey, ...]:
    items = obj.get(key) or []
    if not isinstance(items, list):
        raise InvalidRunEvent(key, "must be a list")
    names = set()
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise InvalidRunEvent(f"{key}[{i}]", "must be an object")
        names.add(dataset_key(_dataset_part(item, "namespace", f"{key}[{i}].namespace"),
                              _dataset_part(item, "name", f"{key}[{i}].name")))
    return tuple(sorted(names))


def _dataset_part(item: dict, part: str, path: str) -> str:
    value = _get(item, part, str, path)
    if (bad := _CONTROL.search(value)) is not None:
        raise InvalidRunEvent(path, f"must not contain a control character, got {bad.group()!r} at {bad.start()}")
    return value


def _partitions(obj: dict, key: str, facets_key: str, condition_key: str) -> tuple[Partition, ...]:
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
            found.add((dataset_key(item["namespace"], item["name"]),   # validated by _datasets
                       tuple((intern(k), str(dimensions[k])) for k in sorted(dimensions))))
    return tuple(sorted(found))


# -- state ------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Run:
    run_id: str
    job_namespace: str
    job_name: str                     # fully qualified
    state: str                        # START, RUNNING, COMPLETE, FAIL, ABORT or UNKNOWN
    parent_run_id: str | None
    started_at: datetime | None
    ended_at: datetime | None
    inputs: tuple[DatasetKey, ...]    # dataset_of(key) gives (namespace, name)
    outputs: tuple[DatasetKey, ...]
    last_event_time: datetime | None  # None: a placeholder, known only as a parent
    partitions: tuple[Partition, ...] = ()  # it read or wrote


@dataclass(frozen=True, slots=True)
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
    inputs: tuple[DatasetKey, ...] = ()       # sorted unions: tuples take a third of a frozenset's memory
    outputs: tuple[DatasetKey, ...] = ()
    partitions: tuple[Partition, ...] = ()
    seen: tuple = ()                          # (type, time) of its events

    def absorb(self, r: RunEventRecord) -> RunFacts:
        t, rank, p = r.event_time, _RANK[r.event_type], r.parent
        return RunFacts(
            self.run_id,
            job=_max(self.job, (t, rank, r.job_namespace, r.job_name)),
            claims=self.claims,
            parent=_max(self.parent, p and (t, rank, p.run_id, p.job_namespace, p.job_name)),
            terminal=_max(self.terminal, (t, rank, r.event_type) if r.event_type in TERMINAL else None),
            progress=_max(self.progress, (t, rank, r.event_type) if r.event_type in ("START", "RUNNING") else None),
            first_start=_min(self.first_start, t if r.event_type == "START" else None),
            first_seen=_min(self.first_seen, t),
            last_seen=_max(self.last_seen, t),
            inputs=_union(self.inputs, r.inputs),
            outputs=_union(self.outputs, r.outputs),
            partitions=_union(self.partitions, r.partitions),
            seen=_union(self.seen, ((r.event_type, t),)),
        )


def _max(a: Any, b: Any) -> Any:
    return a if b is None else b if a is None else max(a, b)


def _min(a: Any, b: Any) -> Any:
    return a if b is None else b if a is None else min(a, b)


def _union(known: tuple, more: tuple) -> tuple:
    return known if all(item in known for item in more) else tuple(sorted({*known, *more}))


class StaleLineageState(RuntimeError):
    """A state read after it was evolved: only the newest state of a history can be read."""


class LineageState:
    """A value: equal states have equal facts. `evolve` updates the index in place, O(the runs
    whose job changed), and the state it was given becomes unreadable (StaleLineageState)
    rather than copying the index per event or silently showing the new facts."""

    __slots__ = ("_index", "_version")
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, index: LineageIndex | None = None) -> None:
        self._index = index
        self._version = index.version if index is not None else 0

    def _read(self) -> LineageIndex:
        if self._index is None:
            return _EMPTY_INDEX
        if self._index.version != self._version:
            raise StaleLineageState("this lineage state was evolved since; read the newest one")
        return self._index

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LineageState):
            return NotImplemented
        return self is other or self._read().facts == other._read().facts

    def __repr__(self) -> str:
        index = self._read()
        return f"LineageState({len(index.jobs)} jobs, {len(index.facts)} runs)"

    @property
    def facts(self) -> Mapping[str, RunFacts]:
        return MappingProxyType(self._read().facts)

    def has_seen(self, record: RunEventRecord) -> bool:
        f = self._read().facts.get(record.run_id)
        return f is not None and (record.event_type, record.event_time) in f.seen

    @property
    def jobs(self) -> Mapping[JobKey, Job]:
        """By (namespace, fully qualified name), in that order."""
        self._read()
        return _Jobs(self)

    @property
    def runs(self) -> Mapping[str, Run]:
        """By run id, in that order; each Run is made when asked for."""
        self._read()
        return _Runs(self)

    def runs_of(self, key: JobKey) -> list[Run]:
        index = self._read()
        return [_run_of(index, run_id) for run_id in sorted(index.runs_of_job.get(key, ()))]

    def latest_run(self, key: JobKey) -> Run | None:
        """The run of this job that started last (first seen, for one without START), else None."""
        index = self._read()
        return _run_of(index, index.latest[key][1]) if key in index.latest else None

    def children_of(self, run_id: str) -> list[Run]:
        index = self._read()
        return [_run_of(index, child) for child in sorted(index.children.get(run_id, ()))]

    def datasets_of(self, key: JobKey) -> tuple[tuple[DatasetKey, ...], tuple[DatasetKey, ...]]:
        """The datasets its runs read and wrote (dataset_key), sorted."""
        index = self._read()
        return tuple(sorted(index.inputs_of_job.get(key, ()))), tuple(sorted(index.outputs_of_job.get(key, ())))

    def jobs_of(self, dataset: DatasetKey) -> tuple[tuple[JobKey, ...], tuple[JobKey, ...]]:
        """The jobs whose runs read and wrote this dataset (dataset_key(namespace, name)), sorted."""
        index = self._read()
        return tuple(sorted(index.readers.get(dataset, ()))), tuple(sorted(index.writers.get(dataset, ())))


class _Jobs(Mapping):
    """A view of one state: it goes stale with it."""

    def __init__(self, state: LineageState) -> None:
        self._state = state

    def __getitem__(self, key: JobKey) -> Job:
        return self._state._read().jobs[key]

    def __contains__(self, key: object) -> bool:
        return key in self._state._read().jobs

    def __iter__(self) -> Iterator[JobKey]:
        return iter(self._state._read().sorted_job_keys())

    def __len__(self) -> int:
        return len(self._state._read().jobs)


class _Runs(Mapping):
    """A view of one state: it goes stale with it."""

    def __init__(self, state: LineageState) -> None:
        self._state = state

    def __getitem__(self, run_id: str) -> Run:
        index = self._state._read()
        if run_id not in index.facts:
            raise KeyError(run_id)
        return _run_of(index, run_id)

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._state._read().facts

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._state._read().facts))

    def __len__(self) -> int:
        return len(self._state._read().facts)


EMPTY = LineageState()
_EMPTY_INDEX = LineageIndex()


def evolve(state: LineageState, record: RunEventRecord) -> LineageState:
    index = state._index if state._index is not None else LineageIndex()
    state._read()                                             # a stale state cannot be evolved either
    if not index.apply(record, RunFacts):
        return state
    index.version += 1
    return LineageState(index)


def fold(records: Iterable[RunEventRecord], state: LineageState = EMPTY) -> LineageState:
    for record in records:
        state = evolve(state, record)
    return state


def _run_of(index: LineageIndex, run_id: str) -> Run:
    f, job = index.facts[run_id], index.job_of_run[run_id]
    chosen = f.terminal or f.progress
    return Run(run_id=f.run_id, job_namespace=job.namespace, job_name=job.name,
               state=chosen[2] if chosen else UNKNOWN, parent_run_id=f.parent[2] if f.parent else None,
               started_at=f.first_start or f.first_seen, ended_at=f.terminal[0] if f.terminal else None,
               inputs=f.inputs, outputs=f.outputs, last_event_time=f.last_seen, partitions=f.partitions)


from sluice.domain.lineage_render import render_tree  # noqa: E402  (it reads LineageState)
