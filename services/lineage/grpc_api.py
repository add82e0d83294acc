"""gRPC edge of the lineage service; the only place that knows the protobuf messages."""
from __future__ import annotations

from datetime import datetime, timezone

from google.protobuf.timestamp_pb2 import Timestamp

from sluice.domain.lineage import Job, Run
from sluice.v1 import lineage_pb2, lineage_pb2_grpc
from sluice_services.lineage.service import LineageService


class LineageServicer(lineage_pb2_grpc.LineageServicer):
    def __init__(self, service: LineageService) -> None:
        self._service = service

    async def ListJobs(self, request: lineage_pb2.ListLineageJobsRequest, context) -> lineage_pb2.ListLineageJobsResponse:
        """Every job, by namespace then fully qualified name; `namespace` filters when set."""
        jobs = self._service.state.jobs.values()
        return lineage_pb2.ListLineageJobsResponse(
            jobs=[_job_to_proto(j) for j in jobs if not request.namespace or j.namespace == request.namespace]
        )

    async def ListRuns(self, request: lineage_pb2.ListLineageRunsRequest, context) -> lineage_pb2.ListLineageRunsResponse:
        """Runs matching every filter that is set (job_namespace, job_name, parent_run_id), oldest first."""
        state = self._service.state
        if request.job_namespace and request.job_name:
            candidates = state.runs_of((request.job_namespace, request.job_name))
        elif request.parent_run_id:
            candidates = state.children_of(request.parent_run_id.lower())
        else:
            candidates = state.runs.values()
        runs = [
            run for run in candidates
            if (not request.job_namespace or run.job_namespace == request.job_namespace)
            and (not request.job_name or run.job_name == request.job_name)
            and (not request.parent_run_id or run.parent_run_id == request.parent_run_id.lower())
        ]
        runs.sort(key=lambda r: (r.started_at is None, r.started_at or datetime.max.replace(tzinfo=timezone.utc), r.run_id))
        return lineage_pb2.ListLineageRunsResponse(runs=[_run_to_proto(r) for r in runs])


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
        inputs=run.inputs,
        outputs=run.outputs,
    )


def _timestamp_to_proto(when: datetime | None) -> Timestamp | None:
    if when is None:
        return None
    stamp = Timestamp()
    stamp.FromDatetime(when)
    return stamp
