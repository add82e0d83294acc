"""The partitions a partition-trigger backfill makes jobs for, listed through the datasets service's
gRPC API (Partitions.ListPartitions), page by page, with the backfill's caller's own credentials:
who may not read a dataset's partitions cannot backfill over them either.

    source = GrpcPartitionSource("datasets:50051", tls_ca=cert)
    source = GrpcPartitionSource(None, ...).in_process(host)   # standalone: spec.on_listening = source.on_listening
"""
from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Callable, Protocol, Sequence

import grpc

from sluice.domain.backfills import MAX_BACKFILL_JOBS, CandidatePartition
from sluice.domain.errors import FailedPrecondition, InvalidArgument, NotFound
from sluice.v1 import datasets_pb2 as pb
from sluice.v1 import datasets_pb2_grpc
from sluice.wire.common import partition_from_proto, timestamp_from_proto, timestamp_to_proto
from sluice_services.launcher.program_api import program_host

PAGE = 1000
CALL_TIMEOUT = 30.0


class PartitionSource(Protocol):
    async def list(self, namespace: str, dataset: str, where: pb.PartitionFilter, start: datetime | None,
                   end: datetime | None, metadata: Sequence[tuple[str, str]]) -> tuple[CandidatePartition, ...]:
        """The dataset's partitions matching `where`, committed in [start, end) (each bound optional), at
        most MAX_BACKFILL_JOBS + 1 of them (one more than a backfill may take, so it can refuse)."""


class GrpcPartitionSource:
    def __init__(self, address: str | None, *, tls_ca: Path | None = None) -> None:
        self._address = address
        self._tls_ca = tls_ca
        self._channel: grpc.aio.Channel | None = None
        self.on_listening: Callable[[int], None] | None = None
        """Set by `in_process`: the checker's spec hands it to the gRPC server."""

    def in_process(self, host: str) -> GrpcPartitionSource:
        """The datasets service is served by this process's gRPC server: its address is learnt once it listens."""
        def listening(port: int) -> None:
            self._address = f"{program_host(host)}:{port}"
        self.on_listening = listening
        return self

    async def list(self, namespace: str, dataset: str, where: pb.PartitionFilter, start: datetime | None,
                   end: datetime | None, metadata: Sequence[tuple[str, str]]) -> tuple[CandidatePartition, ...]:
        request = pb.ListPartitionsRequest(namespace=namespace, dataset=dataset, where=where, limit=PAGE)
        if start is not None:
            request.committed_after.CopyFrom(timestamp_to_proto(start))
        if end is not None:
            request.committed_before.CopyFrom(timestamp_to_proto(end))
        stub = datasets_pb2_grpc.PartitionsStub(self._connected())
        found: list[CandidatePartition] = []
        while len(found) <= MAX_BACKFILL_JOBS:
            try:
                page = await stub.ListPartitions(request, timeout=CALL_TIMEOUT, metadata=tuple(metadata))
            except grpc.aio.AioRpcError as refused:
                raise _refusal(refused, namespace, dataset) from None
            found += [CandidatePartition(partition_from_proto(p.partition),
                                         timestamp_from_proto(p.committed_at, "committed_at")) for p in page.partitions]
            if not page.next_after:
                break
            request.after = page.next_after
        return tuple(found)

    def _connected(self) -> grpc.aio.Channel:
        if self._channel is None:
            if self._address is None:
                raise FailedPrecondition("the checker has no datasets service address to list partitions from: "
                                         "give --datasets-address HOST:PORT")
            if self._tls_ca is not None:
                credentials = grpc.ssl_channel_credentials(Path(self._tls_ca).read_bytes())
                self._channel = grpc.aio.secure_channel(self._address, credentials)
            else:
                self._channel = grpc.aio.insecure_channel(self._address)
        return self._channel


def _refusal(refused: grpc.aio.AioRpcError, namespace: str, dataset: str) -> Exception:
    what = f"listing the partitions of {namespace}.{dataset}: {refused.details() or refused.code().name}"
    match refused.code():
        case grpc.StatusCode.NOT_FOUND:
            return NotFound(what)
        case grpc.StatusCode.INVALID_ARGUMENT:
            return InvalidArgument("--keys", what)
        case _:
            return FailedPrecondition(what)
