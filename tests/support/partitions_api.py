"""The datasets service's gRPC API (Partitions, and with a partitions dir RunData) over a test's
datasets service object, served from a thread of its own, so a program run in the test's process or
by spark-submit reaches its datasets as a launched program does (context.json system.api), and a
launcher publishes through it as it does in production.

    with PartitionsApiServer(plane, root / "data") as api:
        context["system"].update(api.context_for(run_id))
        launcher = LauncherService(..., run_data=api.run_data(), program_api=ProgramApi(api.run_data()))
"""
from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from sluice.runtime.grpc_server import start_server
from sluice_services.datasets import grpc_api as datasets_grpc
from sluice_services.datasets.run_credentials import RunCredentials
from sluice_services.datasets.run_outputs import RunPublisher
from sluice_services.datasets.service import DatasetsService
from sluice_services.launcher.run_data_grpc import GrpcRunData

TEST_SECRET = b"partitions api test secret"


class PartitionsApiServer:
    """Plaintext on loopback, no authentication: the tests of what a program does with its API (the
    credential's own checks run in a real server's tests)."""

    def __init__(self, plane: DatasetsService, partitions_dir: Path | None = None) -> None:
        self._plane = plane
        self.credentials = RunCredentials(TEST_SECRET, plane.access)
        self._publisher = RunPublisher(plane, partitions_dir) if partitions_dir is not None else None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server = None
        self.port = 0

    def __enter__(self) -> "PartitionsApiServer":
        self._thread.start()
        bindings = datasets_grpc.bindings(self._plane, self._publisher, self.credentials)
        start = start_server(bindings, "127.0.0.1", 0)
        self._server, self.port = asyncio.run_coroutine_threadsafe(start, self._loop).result(30)
        return self

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def context_for(self, run_id: str) -> dict:
        """What the launcher adds to a run's context.json `system`."""
        access = self._plane.access(run_id)
        return {"api": {"address": self.address,
                        "token": self.credentials.issue(run_id, access.attempt if access is not None else 0)}}

    def run_data(self) -> GrpcRunData:
        """The launcher's port to this server (RunData needs the partitions dir given)."""
        return GrpcRunData(self.address, patience=10.0)

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            asyncio.run_coroutine_threadsafe(self._server.stop(0.5), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
