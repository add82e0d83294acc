"""gRPC edge of the launcher: run inspection."""
from __future__ import annotations

from sluice.runtime.errors import InvalidArgument, NotFound
from sluice.runtime.grpc_server import GrpcBinding, grpc_errors
from sluice.v1 import runs_pb2, runs_pb2_grpc
from sluice.wire.runs import run_to_proto
from sluice_services.launcher.service import LauncherService


class RunsServicer(runs_pb2_grpc.RunsServicer):
    def __init__(self, launcher: LauncherService) -> None:
        self._launcher = launcher

    @grpc_errors
    async def ListRuns(self, request, context):
        return runs_pb2.ListRunsResponse(runs=[run_to_proto(r) for r in self._launcher.runs(request.schedule_id)])

    @grpc_errors
    async def GetRun(self, request, context):
        if not request.id:
            raise InvalidArgument("id", "must not be empty")
        run = self._launcher.get(request.id)
        if run is None:
            raise NotFound(f"run {request.id} does not exist")
        return run_to_proto(run)


def bindings(launcher: LauncherService) -> list[GrpcBinding]:
    return [GrpcBinding(runs_pb2.DESCRIPTOR.services_by_name["Runs"].full_name,
                        runs_pb2_grpc.add_RunsServicer_to_server, RunsServicer(launcher))]
