"""The RunData port over the datasets service's gRPC API (sluice/v1/datasets.proto, service RunData).

    run_data = GrpcRunData("datasets:50051", token=settings.grpc_security.token, tls_ca=cert)
    run_data = GrpcRunData(None, ...); spec.on_listening = run_data.in_process(host)   # standalone

A datasets service that cannot be reached (UNAVAILABLE, a deadline) is waited for with a capped
backoff for up to `patience` seconds: publishing is idempotent, so a call repeated after the service
came back publishes nothing twice. A refusal of the run's outputs is a PublishError; of any other
request, the domain error its status stands for (InvalidArgument naming the field, NotFound, ...)."""
from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any, Awaitable, Callable, TypeVar

import grpc

from sluice.datasets.files import PublishError
from sluice.domain.datasets.run_access import AccessGrant
from sluice.domain.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from sluice.domain.runs import OutputPartition
from sluice.v1 import datasets_pb2 as pb
from sluice.v1 import datasets_pb2_grpc
from sluice.wire.common import partition_from_proto
from sluice_services.launcher.program_api import program_host

log = logging.getLogger(__name__)

T = TypeVar("T")
WAITED_OUT = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
REFUSALS = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND,
            grpc.StatusCode.ALREADY_EXISTS)
CALL_TIMEOUT = 60.0
"""A publish moves the run's files: it may take a while."""
DEFAULT_PATIENCE = 300.0
MAX_BACKOFF = 5.0
MAX_REQUEST_BYTES = 4 * 1024 * 1024
"""gRPC's default largest message, which the datasets service receives."""


class DatasetsUnreachable(OSError):
    """The datasets service did not answer for `patience` seconds, or refused the launcher itself."""


class GrpcRunData:
    def __init__(self, address: str | None, *, token: str = "", tls_ca: Path | None = None,
                 patience: float = DEFAULT_PATIENCE) -> None:
        """`address`: host:port of the datasets service; None until `in_process` learns it."""
        self._address = address
        self._token = token
        self._tls_ca = tls_ca
        self._patience = patience
        self._channel: grpc.aio.Channel | None = None
        self._stub: datasets_pb2_grpc.RunDataStub | None = None

    def in_process(self, host: str) -> Callable[[int], None]:
        """The datasets service is served by this process's gRPC server: its on_listening."""
        def listening(port: int) -> None:
            self._address = f"{program_host(host)}:{port}"
        return listening

    def address(self) -> str:
        if self._address is None:
            raise RuntimeError("the gRPC server is not listening yet: no datasets address to give a program")
        return self._address

    async def open_run(self, run_id: str, grants: tuple[AccessGrant, ...], attempt: int = 0) -> str:
        request = pb.OpenRunRequest(run_id=run_id, grants=[pb.RunGrant(namespace=g.namespace, datasets=g.datasets)
                                                           for g in grants], attempt=attempt)
        try:
            return (await self._call(lambda stub, **kw: stub.OpenRun(request, **kw), f"run {run_id}: opening")).token
        except grpc.aio.AioRpcError as refused:
            raise _domain_error(refused) from None

    async def publish(self, run_id: str, result: dict[str, Any], attempt: int = 0) -> tuple[OutputPartition, ...]:
        request = pb.PublishRunRequest(run_id=run_id, result_json=json.dumps(result), attempt=attempt)
        if request.ByteSize() > MAX_REQUEST_BYTES:  # the server would refuse it unread (RESOURCE_EXHAUSTED), every time
            raise PublishError(f"the program's result makes a PublishRun request too large: {request.ByteSize():,} "
                               f"bytes, over gRPC's {MAX_REQUEST_BYTES:,}")
        try:
            response = await self._call(lambda stub, **kw: stub.PublishRun(request, **kw), f"run {run_id}: publishing")
        except grpc.aio.AioRpcError as refused:
            raise PublishError(refused.details() or refused.code().name) from None
        return _outputs(response.outputs)

    async def release(self, run_id: str, consumed: Any, reason: str,
                      attempt: int = 0) -> tuple[OutputPartition, ...] | None:
        request = pb.ReleaseRunRequest(run_id=run_id, consumed_json=json.dumps(consumed) if consumed else "",
                                       reason=reason[:500], attempt=attempt)
        try:
            response = await self._call(lambda stub, **kw: stub.ReleaseRun(request, **kw), f"run {run_id}: releasing")
        except grpc.aio.AioRpcError as refused:
            raise _domain_error(refused) from None
        return _outputs(response.outputs) if response.published else None

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = self._stub = None

    async def _call(self, call: Callable[..., Awaitable[T]], what: str) -> T:
        """The call, waiting out an unreachable datasets service; a refusal (REFUSALS) is raised as
        AioRpcError, anything else as DatasetsUnreachable."""
        loop = asyncio.get_running_loop()
        deadline, backoff = loop.time() + self._patience, 0.1
        while True:
            try:
                return await call(self._connected(), timeout=CALL_TIMEOUT, metadata=self._metadata())
            except grpc.aio.AioRpcError as error:
                if error.code() in REFUSALS:
                    raise
                if error.code() not in WAITED_OUT or loop.time() >= deadline:
                    raise DatasetsUnreachable(f"{what}: the datasets service at {self._address}: "
                                              f"{error.code().name}: {error.details()}") from None
                log.warning("%s: the datasets service at %s: %s; trying again", what, self._address, error.code().name)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF)

    def _connected(self) -> datasets_pb2_grpc.RunDataStub:
        if self._stub is None:
            address = self.address()
            if self._tls_ca is not None:
                credentials = grpc.ssl_channel_credentials(Path(self._tls_ca).read_bytes())
                self._channel = grpc.aio.secure_channel(address, credentials)
            else:
                self._channel = grpc.aio.insecure_channel(address)
            self._stub = datasets_pb2_grpc.RunDataStub(self._channel)
        return self._stub

    def _metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self._token}"),) if self._token else ()


def _outputs(outputs) -> tuple[OutputPartition, ...]:
    return tuple(OutputPartition(o.namespace, o.dataset, partition_from_proto(o.partition), o.announced)
                 for o in outputs)


def _domain_error(refused: grpc.aio.AioRpcError) -> Exception:
    details = refused.details() or refused.code().name
    if refused.code() is grpc.StatusCode.INVALID_ARGUMENT:
        field, _, message = details.partition(": ")
        return InvalidArgument(field, message) if message else InvalidArgument("request", details)
    kinds = {grpc.StatusCode.NOT_FOUND: NotFound, grpc.StatusCode.ALREADY_EXISTS: AlreadyExists}
    return kinds.get(refused.code(), FailedPrecondition)(details)
