"""The launcher's Partitions gRPC API over a test's data plane, served from a thread of its own, so
a program run in the test's process or by spark-submit reaches its datasets as a launched program
does (context.json system.api).

    with PartitionsApiServer(plane) as api:
        context["system"].update(api.context_for(run_id))
"""
from __future__ import annotations

import asyncio
import threading
from sluice.runtime.grpc_server import start_server
from sluice_services.launcher import datasets_grpc
from sluice_services.launcher.datasets_service import DatasetsService
from sluice_services.launcher.program_api import ProgramApi
from sluice_services.launcher.run_credentials import RunCredentials

TEST_SECRET = b"partitions api test secret"


class PartitionsApiServer:
    """Plaintext on loopback, no authentication: the tests of what a program does with its API (the
    credential's own checks run in a real server's tests)."""

    def __init__(self, plane: DatasetsService) -> None:
        self._plane = plane
        self.credentials = RunCredentials(TEST_SECRET, lambda run_id: None)
        self.api = ProgramApi(self.credentials, "127.0.0.1")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server = None
        self.port = 0

    def __enter__(self) -> "PartitionsApiServer":
        self._thread.start()
        start = start_server(datasets_grpc.bindings(self._plane), "127.0.0.1", 0)
        self._server, self.port = asyncio.run_coroutine_threadsafe(start, self._loop).result(30)
        self.api.listening(self.port)
        return self

    def context_for(self, run_id: str) -> dict:
        """What the launcher adds to a run's context.json `system`."""
        return self.api.context_for(run_id)

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            asyncio.run_coroutine_threadsafe(self._server.stop(0.5), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
