"""gRPC edge of the lineage service; the only place that knows the protobuf messages."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from sluice.domain.lineage import Job, LineageState, Run, dataset_of
from sluice.paging import after_key, fill_page, next_page_token, paging
from sluice.domain.errors import FailedPrecondition, InvalidArgument, NotFound
from sluice.runtime.errors import MalformedMessage
from sluice.runtime.grpc_server import grpc_errors
from sluice.v1 import lineage_pb2, lineage_pb2_grpc
from sluice_services.lineage.http_api import MAX_BODY_BYTES
from sluice_services.lineage.queries import (
    DEFAULT_DEPTH, MAX_DEPTH, Graph, dataset_text, find_job, job_order, run_order,
)
from sluice_services.lineage.service import LineageService

LIST_JOBS, LIST_RUNS = "Lineage.ListJobs", "Lineage.ListRuns"
"""The listings' names in their page tokens: a token of one is refused by the other."""


class LineageServicer(lineage_pb2_grpc.LineageServicer):
    def __init__(self, service: LineageService) -> None:
        self._service = service
        # The last listing's filters and run keys in order, reused while the state is the same object:
        # a million runs take seconds to order, so the next page costs only its own runs.
        self._run_order: tuple[LineageState, tuple[str, str, str], list[tuple]] | None = None

    @grpc_errors
    async def ListJobs(self, request: lineage_pb2.ListLineageJobsRequest, context) -> lineage_pb2.ListLineageJobsResponse:
        """Every job, by namespace then fully qualified name; `namespace` filters when set. Paged."""
        size, after = paging(request, LIST_JOBS, _lineage_job_key)
        jobs = self._service.state.jobs.values()
        found = [j for j in jobs if not request.namespace or j.namespace == request.namespace]
        jobs, last = fill_page(after_key(found, job_order, after), size, _job_to_proto)
        return lineage_pb2.ListLineageJobsResponse(jobs=jobs, next_page_token=next_page_token(LIST_JOBS, last))

    @grpc_errors
    async def ListRuns(self, request: lineage_pb2.ListLineageRunsRequest, context) -> lineage_pb2.ListLineageRunsResponse:
        """Runs matching every filter that is set (job_namespace, job_name, parent_run_id), oldest first. Paged."""
        size, after = paging(request, LIST_RUNS, _run_key)
        state = self._service.state
        filters = (request.job_namespace, request.job_name, request.parent_run_id.lower())
        if self._run_order is None or self._run_order[0] is not state or self._run_order[1] != filters:
            self._run_order = state, filters, sorted(run_order(run) for run in _matching_runs(state, *filters))
        runs = state.runs
        found, last = fill_page(after_key(self._run_order[2], lambda key: key, after), size,
                                lambda key: _run_to_proto(runs[key[2]]))
        return lineage_pb2.ListLineageRunsResponse(runs=found, next_page_token=next_page_token(LIST_RUNS, last))

    @grpc_errors
    async def RecordEvent(self, request: lineage_pb2.RecordLineageEventRequest, context) -> lineage_pb2.RecordLineageEventResponse:
        """Record one OpenLineage run event (its JSON text), as POST /api/v1/lineage does."""
        if len(request.event) > MAX_BODY_BYTES:
            raise InvalidArgument("event", f"over {MAX_BODY_BYTES} bytes ({len(request.event)})")
        before = self._service.state
        try:
            self._service.handle_message(request.event)
        except MalformedMessage as error:
            raise InvalidArgument("event", str(error)) from error
        return lineage_pb2.RecordLineageEventResponse(duplicate=self._service.state is before)

    @grpc_errors
    async def GetJob(self, request: lineage_pb2.GetLineageJobRequest, context) -> lineage_pb2.GetLineageJobResponse:
        """A job by fully qualified name, or by the simple name only one job of the namespace has."""
        found = find_job(self._service.state, request.namespace, request.name)
        if found.job is not None:
            return lineage_pb2.GetLineageJobResponse(job=_job_to_proto(found.job), resolved=found.resolved)
        if found.candidates:
            raise FailedPrecondition(f"name: job {request.name!r} is ambiguous in namespace {request.namespace!r}: "
                                     f"several jobs have this simple name: {', '.join(found.candidates)}")
        raise NotFound(f"no job {request.name!r} in namespace {request.namespace!r}")

    @grpc_errors
    async def GetLineage(self, request: lineage_pb2.GetLineageRequest, context) -> lineage_pb2.GetLineageResponse:
        """The jobs and datasets within `depth` edges of a node, as GET /api/v1/lineage answers."""
        depth = request.depth if request.HasField("depth") else DEFAULT_DEPTH
        if not 0 <= depth <= MAX_DEPTH:
            raise InvalidArgument("depth", f"must be from 0 to {MAX_DEPTH}, got {depth}")
        graph = Graph(self._service.state)
        start = graph.find(request.node_id)
        if start is None:
            raise NotFound(f"node_id: no node {request.node_id!r} (job:<namespace>:<name> or dataset:<namespace>:<name>)")
        return _graph_to_proto(graph.around(start, depth))


def _matching_runs(state: LineageState, job_namespace: str, job_name: str, parent_run_id: str) -> list[Run]:
    """Runs matching every filter that is set."""
    if job_namespace and job_name:
        candidates = state.runs_of((job_namespace, job_name))
    elif parent_run_id:
        candidates = state.children_of(parent_run_id)
    else:
        candidates = state.runs.values()
    return [
        run for run in candidates
        if (not job_namespace or run.job_namespace == job_namespace)
        and (not job_name or run.job_name == job_name)
        and (not parent_run_id or run.parent_run_id == parent_run_id)
    ]


def _lineage_job_key(key: tuple) -> bool:
    return len(key) == 2 and all(isinstance(v, str) for v in key)


def _run_key(key: tuple) -> bool:
    return len(key) == 3 and isinstance(key[0], bool) and type(key[1]) is int and isinstance(key[2], str)


def _graph_to_proto(rendered: list[dict[str, Any]]) -> lineage_pb2.GetLineageResponse:
    nodes, edges = [], set()
    for node in rendered:
        data = node["data"]
        if node["type"] == "JOB":
            nodes.append(lineage_pb2.LineageNode(id=node["id"], type="JOB", job=lineage_pb2.LineageJob(
                namespace=data["namespace"], name=data["name"], simple_name=data["simpleName"],
                parent_job_name=data["parentJobName"] or "")))
        else:
            nodes.append(lineage_pb2.LineageNode(id=node["id"], type="DATASET",
                                                 dataset_namespace=data["namespace"], dataset_name=data["name"]))
        edges.update((e["origin"], e["destination"]) for e in [*node["inEdges"], *node["outEdges"]])
    return lineage_pb2.GetLineageResponse(
        nodes=nodes, edges=[lineage_pb2.LineageEdge(origin=o, destination=d) for o, d in sorted(edges)])


def _job_to_proto(job: Job) -> lineage_pb2.LineageJob:
    return lineage_pb2.LineageJob(
        namespace=job.namespace,
        name=job.name,
        simple_name=job.simple_name,
        parent_job_name=job.parent_job_name or "",
    )


def _run_to_proto(run: Run) -> lineage_pb2.LineageRun:
    return lineage_pb2.LineageRun(
        run_id=run.run_id,
        job_namespace=run.job_namespace,
        job_name=run.job_name,
        state=run.state,
        parent_run_id=run.parent_run_id or "",
        started_at=_timestamp_to_proto(run.started_at),
        ended_at=_timestamp_to_proto(run.ended_at),
        inputs=[dataset_text(d) for d in run.inputs],      # the proto's "namespace/name" strings
        outputs=[dataset_text(d) for d in run.outputs],
        input_datasets=[_dataset_message(d) for d in run.inputs],
        output_datasets=[_dataset_message(d) for d in run.outputs],
    )


def _dataset_message(key: str) -> lineage_pb2.LineageDataset:
    namespace, name = dataset_of(key)
    return lineage_pb2.LineageDataset(namespace=namespace, name=name)


def _timestamp_to_proto(when: datetime | None) -> Timestamp | None:
    if when is None:
        return None
    stamp = Timestamp()
    stamp.FromDatetime(when)
    return stamp
