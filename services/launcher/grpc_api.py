"""gRPC edge of the launcher: run inspection, cancel and logs."""
from __future__ import annotations

import grpc

from sluice.paging import fill_page, is_time_and_id, next_page_token, paging
from sluice.domain.errors import InvalidArgument, NotFound
from sluice.runtime.grpc_security import CALLER
from sluice.runtime.grpc_server import GrpcBinding, grpc_errors
from sluice.v1 import runs_pb2, runs_pb2_grpc
from sluice.wire.runs import run_to_proto
from sluice_services.launcher.run_logs import read_log
from sluice_services.launcher.service import LauncherService

MAX_REASON_CHARS = 1000


class RunsServicer(runs_pb2_grpc.RunsServicer):
    def __init__(self, launcher: LauncherService) -> None:
        self._launcher = launcher

    @grpc_errors
    async def ListRuns(self, request, context):
        """A page of the runs, oldest first: at most page_size, and no more than MAX_PAGE_BYTES."""
        size, after = paging(request, LIST_RUNS, is_time_and_id)
        runs, last = fill_page(self._launcher.listing(request.schedule_id, after), size, run_to_proto)
        return runs_pb2.ListRunsResponse(runs=runs, next_page_token=next_page_token(LIST_RUNS, last))

    @grpc_errors
    async def GetRun(self, request, context):
        if not request.id:
            raise InvalidArgument("id", "must not be empty")
        run = self._launcher.get(request.id)
        if run is None:
            raise NotFound(f"run {request.id} does not exist")
        return run_to_proto(run)

    @grpc_errors
    async def CancelRun(self, request, context):
        if not request.id:
            raise InvalidArgument("id", "must not be empty")
        reason = " ".join(request.reason.split())
        if len(reason) > MAX_REASON_CHARS:
            raise InvalidArgument("reason", f"at most {MAX_REASON_CHARS} characters, got {len(reason)}")
        if not reason.isprintable():
            raise InvalidArgument("reason", "must not hold control characters")
        caller = CALLER.get()
        requested_by = caller.name if caller is not None else f"a client at {context.peer()}"
        return run_to_proto(await self._launcher.cancel(request.id, reason, requested_by))

    async def StreamRunLog(self, request, context):
        chunks = read_log(self._launcher.runs_root, self._launcher.get, request.id, request.attempt,
                          request.from_offset, request.follow, request.tail_lines)
        try:
            async for chunk in chunks:
                yield runs_pb2.RunLogChunk(attempt=chunk.attempt, offset=chunk.offset, data=chunk.data)
        except InvalidArgument as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        except NotFound as error:
            await context.abort(grpc.StatusCode.NOT_FOUND, str(error))
        finally:
            await chunks.aclose()


LIST_RUNS = "Runs.ListRuns"


def bindings(launcher: LauncherService) -> list[GrpcBinding]:
    return [GrpcBinding(runs_pb2.DESCRIPTOR.services_by_name["Runs"].full_name,
                        runs_pb2_grpc.add_RunsServicer_to_server, RunsServicer(launcher))]
