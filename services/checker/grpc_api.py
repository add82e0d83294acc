"""gRPC edge of the constraint-checker: job inspection."""
from __future__ import annotations

from sluice.domain.constraints import Waiting
from sluice.domain.jobs import JobState
from sluice.paging import next_page_token, paging
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
        """A page of the jobs, oldest first: at most page_size, and no more than MAX_PAGE_BYTES."""
        size, after = paging(request, LIST_JOBS, _valid_key)
        waiting = self._checker.waiting()
        response, total, last = jobs_pb2.ListJobsResponse(), _TOKEN_ROOM, None
        for key, view in self._view.listing(request.schedule_id, request.pending_only, after):
            message = None if len(response.jobs) == size else _to_proto(view, waiting.get(view.id))
            total += message.ByteSize() + _ENTRY_OVERHEAD if message is not None else 0
            if message is None or (response.jobs and total > MAX_PAGE_BYTES):  # a next page holds this job
                response.next_page_token = next_page_token(LIST_JOBS, last)
                break
            response.jobs.append(message)
            last = key
        return response


LIST_JOBS = "Jobs.ListJobs"
MAX_PAGE_BYTES = 2 * 1024 * 1024
"""Half of gRPC's default 4 MB message limit: a job's trigger context can carry many partitions."""
_ENTRY_OVERHEAD, _TOKEN_ROOM = 6, 256
"""A repeated entry's tag and length; the next_page_token field."""


def _valid_key(key: tuple) -> bool:
    return len(key) == 2 and type(key[0]) is int and isinstance(key[1], str)


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
