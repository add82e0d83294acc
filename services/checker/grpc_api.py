"""gRPC edge of the constraint-checker: job inspection."""
from __future__ import annotations

from sluice.domain.constraints import Waiting
from sluice.domain.jobs import JobState
from sluice.readmodels.jobs import JobsView, JobView
from sluice.runtime.grpc_server import GrpcBinding, grpc_errors
from sluice.v1 import jobs_pb2, jobs_pb2_grpc
from sluice.wire.common import timestamp_to_proto
from sluice.wire.jobs import job_to_proto
from sluice_services.checker.service import CheckerService


class JobsServicer(jobs_pb2_grpc.JobsServicer):
    def __init__(self, view: JobsView, checker: CheckerService) -> None:
        self._view = view
        self._checker = checker

    @grpc_errors
    async def ListJobs(self, request, context):
        found = self._view.list(request.schedule_id)
        if request.pending_only:
            found = [v for v in found if v.state not in (JobState.LAUNCHED, JobState.DISCARDED)]
        waiting = self._checker.waiting()
        return jobs_pb2.ListJobsResponse(jobs=[_to_proto(v, waiting.get(v.id)) for v in found])


def _to_proto(view: JobView, waiting: Waiting | None) -> jobs_pb2.Job:
    if view.job is not None:
        message = job_to_proto(view.job, view.state, view.reason)
    else:
        message = jobs_pb2.Job(id=view.id, schedule_id=view.schedule_id, state=jobs_pb2.JobState.Value(view.state.value),
                               reason=view.reason, created_at=timestamp_to_proto(view.created_at))
    message.updated_at.CopyFrom(timestamp_to_proto(view.updated_at))
    message.run_id = view.run_id
    if waiting is not None and view.state is JobState.PENDING_CONSTRAINT:
        message.waiting_on.extend(waiting.reasons)
        message.reason = "; ".join(waiting.reasons)
        if waiting.next_check is not None:
            message.next_check.CopyFrom(timestamp_to_proto(waiting.next_check))
    message.history.extend(jobs_pb2.JobTransition(state=jobs_pb2.JobState.Value(t.state.value),
                                                  at=timestamp_to_proto(t.at), cause=t.cause) for t in view.history)
    return message


def bindings(view: JobsView, checker: CheckerService) -> list[GrpcBinding]:
    return [GrpcBinding(jobs_pb2.DESCRIPTOR.services_by_name["Jobs"].full_name,
                        jobs_pb2_grpc.add_JobsServicer_to_server, JobsServicer(view, checker))]
