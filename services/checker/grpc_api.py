"""gRPC edge of the constraint-checker: job inspection, run now and backfills (run_control_grpc)."""
from __future__ import annotations

from sluice.domain.constraints import Waiting
from sluice.domain.jobs import JobState
from sluice.paging import fill_page, is_time_and_id, next_page_token, paging
from sluice.readmodels.jobs import JobsView, JobView
from sluice.runtime.grpc_server import GrpcBinding, grpc_errors
from sluice.v1 import jobs_pb2, jobs_pb2_grpc
from sluice.wire.common import timestamp_to_proto
from sluice.wire.jobs import job_to_proto
from sluice_services.checker.partitions import PartitionSource
from sluice_services.checker.run_control_grpc import RunControlRpcs
from sluice_services.checker.service import CheckerService


class JobsServicer(RunControlRpcs, jobs_pb2_grpc.JobsServicer):
    def __init__(self, view: JobsView, checker: CheckerService, partitions: PartitionSource) -> None:
        self._view = view
        self._checker = checker
        self._partitions = partitions

    @grpc_errors
    async def ListJobs(self, request, context):
        """A page of the jobs, oldest first: at most page_size, and no more than MAX_PAGE_BYTES."""
        size, after = paging(request, LIST_JOBS, is_time_and_id)
        waiting = self._checker.waiting()
        jobs, last = fill_page(self._view.listing(request.schedule_id, request.pending_only, after), size,
                               lambda view: _to_proto(view, waiting.get(view.id)))
        return jobs_pb2.ListJobsResponse(jobs=jobs, next_page_token=next_page_token(LIST_JOBS, last))


LIST_JOBS = "Jobs.ListJobs"


def _to_proto(view: JobView, waiting: Waiting | None) -> jobs_pb2.Job:
    if view.job is not None:
        message = job_to_proto(view.job, view.state, view.reason)
    else:
        message = jobs_pb2.Job(id=view.id, schedule_id=view.schedule_id, state=jobs_pb2.JobState.Value(view.state.value),
                               reason=view.reason, created_at=timestamp_to_proto(view.created_at))
    message.updated_at.CopyFrom(timestamp_to_proto(view.updated_at))
    message.run_id = view.run_id
    message.notifications_matched = view.notifications
    message.partitions_matched.extend(jobs_pb2.DatasetPartitions(namespace=namespace, dataset=dataset, partitions=count)
                                      for namespace, dataset, count in view.partitions)
    if waiting is not None and view.state is JobState.PENDING_CONSTRAINT:
        message.waiting_on.extend(waiting.reasons)
        message.reason = "; ".join(waiting.reasons)
        if waiting.next_check is not None:
            message.next_check.CopyFrom(timestamp_to_proto(waiting.next_check))
    message.history.extend(jobs_pb2.JobTransition(state=jobs_pb2.JobState.Value(t.state.value),
                                                  at=timestamp_to_proto(t.at), cause=t.cause) for t in view.history)
    return message


def bindings(view: JobsView, checker: CheckerService, partitions: PartitionSource) -> list[GrpcBinding]:
    return [GrpcBinding(jobs_pb2.DESCRIPTOR.services_by_name["Jobs"].full_name,
                        jobs_pb2_grpc.add_JobsServicer_to_server, JobsServicer(view, checker, partitions))]
