"""The lineage projection as the Marquez API shapes it, for the Marquez web UI: namespaces, jobs,
runs (Marquez's run states), datasets and their versions, search results.

Seed 002's rule: a child job lives in its parent's namespace (its root ancestor's), whatever its own
events say; `home_namespace` gives it, and the routes redirect a job asked for under its own one.
Facets are not in the projection: they are read from the run's recorded events (`EventsOf`), one
stream read per run shown, so only single items and pages carry them.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterable

from sluice.domain.lineage import DatasetKey, Job, LineageState, Run, dataset_key, dataset_of
from sluice.ids import derived_id

EventsOf = Callable[[str], list[dict[str, Any]]]
"""A run id -> its recorded run events as received (LineageService.events_of)."""

RUN_STATES = {"START": "RUNNING", "RUNNING": "RUNNING", "COMPLETE": "COMPLETED", "FAIL": "FAILED",
              "ABORT": "ABORTED", "UNKNOWN": "NEW"}
"""OpenLineage's last event type -> Marquez's run state (NEW, RUNNING, COMPLETED, FAILED, ABORTED)."""
OWNER = "sluice"


def home_namespace(state: LineageState, job: Job) -> str:
    """The namespace of its root ancestor job (seed 002); its own for a root."""
    seen = {job.key}
    while job.parent_job_name is not None and job.parent_job_namespace is not None:
        parent = state.jobs.get((job.parent_job_namespace, job.parent_job_name))
        if parent is None:
            return job.parent_job_namespace
        if parent.key in seen:                                   # a cycle: cut where it closes
            return parent.namespace
        seen.add(parent.key)
        job = parent
    return job.namespace


def jobs_by_home(state: LineageState) -> dict[str, list[Job]]:
    """Every job under its home namespace, by fully qualified name."""
    found: dict[str, list[Job]] = {}
    for job in state.jobs.values():
        found.setdefault(home_namespace(state, job), []).append(job)
    for jobs in found.values():
        jobs.sort(key=lambda job: (job.name, job.namespace))
    return found


def datasets(state: LineageState) -> list[DatasetKey]:
    """Every dataset some run read or wrote, sorted by namespace then name."""
    found: set[DatasetKey] = set()
    for key in state.jobs:
        inputs, outputs = state.datasets_of(key)
        found.update(inputs, outputs)
    return sorted(found)


def find_dataset(state: LineageState, namespace: str, name: str) -> DatasetKey | None:
    try:
        key = dataset_key(namespace, name)
    except ValueError:
        return None
    readers, writers = state.jobs_of(key)
    return key if readers or writers else None


# -- shapes -------------------------------------------------------------------------------------

def iso(when: datetime | None) -> str | None:
    return when.isoformat().replace("+00:00", "Z") if when else None


def run_json(run: Run, facets: dict[str, Any] | None = None) -> dict[str, Any]:
    """A Marquez Run, with Sluice's extras (jobName, jobNamespace, parentRunId, inputs, outputs, partitions)."""
    created = run.started_at or run.last_event_time
    duration = (run.ended_at - run.started_at) // _MILLISECOND if run.started_at and run.ended_at else None
    job_version = {"namespace": run.job_namespace, "name": run.job_name,
                   "version": derived_id("lineage-job", run.job_namespace, run.job_name)}
    return {
        "id": run.run_id, "createdAt": iso(created), "updatedAt": iso(run.last_event_time or created),
        "nominalStartTime": None, "nominalEndTime": None, "state": RUN_STATES.get(run.state, "NEW"),
        "startedAt": iso(run.started_at), "endedAt": iso(run.ended_at), "durationMs": duration,
        "args": {}, "jobVersion": job_version, "context": {}, "facets": facets or {},
        "inputDatasetVersions": [], "outputDatasetVersions": [],
        "jobName": run.job_name, "jobNamespace": run.job_namespace, "parentRunId": run.parent_run_id,
        "inputs": [dataset_id(d) for d in run.inputs], "outputs": [dataset_id(d) for d in run.outputs],
        "partitions": [{**dataset_id(d), "dimensions": dict(dims)} for d, dims in run.partitions],
    }


def job_json(state: LineageState, job: Job, facets: dict[str, Any] | None = None,
             home: str | None = None) -> dict[str, Any]:
    """A Marquez Job under its home namespace (`home`, if the caller knows it); `ownNamespace` is
    the one its events give."""
    inputs, outputs = state.datasets_of(job.key)
    latest = state.latest_run(job.key)
    home = home if home is not None else home_namespace(state, job)
    created = (latest.started_at or latest.last_event_time) if latest else None
    return {
        "id": {"namespace": home, "name": job.name}, "type": "BATCH", "name": job.name,
        "simpleName": job.simple_name, "parentJobName": job.parent_job_name, "parentJobUuid": None,
        "namespace": home, "ownNamespace": job.namespace,
        "createdAt": iso(created), "updatedAt": iso(latest.last_event_time if latest else None),
        "inputs": [dataset_id(d) for d in inputs], "outputs": [dataset_id(d) for d in outputs],
        "location": None, "description": None, "context": {}, "facets": facets or {}, "tags": [],
        "currentVersion": derived_id("lineage-job", job.namespace, job.name),
        "latestRun": run_json(latest) if latest else None,
    }


def dataset_id(key: DatasetKey) -> dict[str, str]:
    namespace, name = dataset_of(key)
    return {"namespace": namespace, "name": name}


def dataset_json(key: DatasetKey, span: tuple[datetime | None, datetime | None],
                 facets: dict[str, Any] | None = None) -> dict[str, Any]:
    """A Marquez Dataset; `span` is (created, last modified); fields from its schema facet."""
    namespace, name = dataset_of(key)
    facets = facets or {}
    return {
        "id": {"namespace": namespace, "name": name}, "type": "DB_TABLE", "name": name, "physicalName": name,
        "createdAt": iso(span[0]), "updatedAt": iso(span[1]), "namespace": namespace, "sourceName": namespace,
        "fields": fields_of(facets), "tags": [], "lastModifiedAt": iso(span[1]), "lastLifecycleState": None,
        "description": None, "facets": facets, "deleted": False, "columnLineage": None,
        "currentVersion": None,
    }


def version_json(key: DatasetKey, run: Run, facets: dict[str, Any]) -> dict[str, Any]:
    """A dataset version: what one run wrote."""
    written = run.ended_at or run.last_event_time
    version = version_of(key, run)
    body = dataset_json(key, (written, written), facets)
    body.update(id={**body["id"], "version": version}, version=version, lifecycleState=None,
                createdByRun=run_json(run))
    return body


def version_of(key: DatasetKey, run: Run) -> str:
    return derived_id("lineage-dataset-version", *dataset_of(key), run.run_id)


def fields_of(facets: dict[str, Any]) -> list[dict[str, Any]]:
    schema = facets.get("schema")
    fields = schema.get("fields") if isinstance(schema, dict) else None
    return [{"name": f.get("name"), "type": f.get("type"), "tags": [], "description": f.get("description")}
            for f in (fields if isinstance(fields, list) else []) if isinstance(f, dict)]


def namespace_json(name: str, span: tuple[datetime | None, datetime | None]) -> dict[str, Any]:
    return {"name": name, "createdAt": iso(span[0]), "updatedAt": iso(span[1]), "ownerName": OWNER,
            "description": None, "isHidden": False}


# -- facets from the recorded events --------------------------------------------------------------

def run_facets(events: Iterable[dict[str, Any]], part: str) -> dict[str, Any]:
    """The run's "run" or "job" facets, merged over its events by event time (the later one wins)."""
    merged: dict[str, Any] = {}
    for event in sorted(events, key=lambda e: str(e.get("eventTime", ""))):
        facets = (event.get(part) or {}).get("facets") or {}
        merged.update(facets if isinstance(facets, dict) else {})
    return merged


def dataset_facets(events: Iterable[dict[str, Any]], key: DatasetKey) -> dict[str, Any]:
    """The facets the run's events gave this dataset (outputs and inputs), the later event winning."""
    namespace, name = dataset_of(key)
    merged: dict[str, Any] = {}
    for event in sorted(events, key=lambda e: str(e.get("eventTime", ""))):
        for side in ("inputs", "outputs"):
            for item in event.get(side) or ():
                if isinstance(item, dict) and item.get("namespace") == namespace and item.get("name") == name:
                    merged.update(item.get("facets") or {})
    return merged


@dataclass(frozen=True)
class Span:
    """When something was first and last seen, from the runs that touched it."""
    first: datetime | None = None
    last: datetime | None = None

    def widen(self, run: Run | None) -> Span:
        if run is None:
            return self
        start, end = run.started_at or run.last_event_time, run.last_event_time or run.started_at
        return Span(min(filter(None, (self.first, start)), default=None),
                    max(filter(None, (self.last, end)), default=None))

    @property
    def pair(self) -> tuple[datetime | None, datetime | None]:
        return self.first, self.last


def dataset_span(state: LineageState, key: DatasetKey) -> Span:
    """From the latest runs of the jobs that read or wrote it."""
    readers, writers = state.jobs_of(key)
    span = Span()
    for job in {*readers, *writers}:
        span = span.widen(state.latest_run(job))
    return span


def versions_of(state: LineageState, key: DatasetKey) -> list[Run]:
    """The runs that wrote this dataset, newest first."""
    _, writers = state.jobs_of(key)
    runs = [run for job in writers for run in state.runs_of(job) if key in run.outputs]
    return sorted(runs, key=lambda run: (run.ended_at or run.last_event_time or _OLDEST, run.run_id), reverse=True)


_MILLISECOND = timedelta(milliseconds=1)
_OLDEST = datetime.min.replace(tzinfo=timezone.utc)
