"""gRPC edge of the constraint-checker: job inspection."""
from __future__ import annotations

from sluice.readmodels.jobs import JobsView, JobView
from sluice.runtime.grpc_server import GrpcBinding, grpc_errors
from sluice.v1 import jobs_pb2, jobs_pb2_grpc
from sluice.wire.common import timestamp_to_proto
from sluice.wire.jobs import job_to_proto


class JobsServicer(jobs_pb2_grpc.JobsServicer):
    def __init__(self, view: JobsView) -> None:
        self._view = view

    @grpc_errors
    async def ListJobs(self, request, context):
        return jobs_pb2.ListJobsResponse(jobs=[_to_proto(v) for v in self._view.list(request.schedule_id)])


def _to_proto(view: JobView) -> jobs_pb2.Job:
    if view.job is not None:
        message = job_to_proto(view.job, view.state, view.reason)
    else:
        message = jobs_pb2.Job(id=view.id, schedule_id=view.schedule_id, state=jobs_pb2.JobState.Value(view.state.value),
                               reason=view.reason, created_at=timestamp_to_proto(view.created_at))
    message.updated_at.CopyFrom(timestamp_to_proto(view.updated_at))
    return message


def bindings(view: JobsView) -> list[GrpcBinding]:
    return [GrpcBinding(jobs_pb2.DESCRIPTOR.services_by_name["Jobs"].full_name,
                        jobs_pb2_grpc.add_JobsServicer_to_server, JobsServicer(view))]
