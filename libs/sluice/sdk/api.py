"""The program's way to Sluice: the datasets service's Partitions gRPC API, with the run's own credential.

    api = GrpcPartitions(context.system.api)     # system.api of context.json: address, token, tls_ca
    api.consume(ref, run_id, limit, where, config)
    api.dataset_exists("experiments", "clickstream")
    api.query("experiments", "clickstream", where, limit)

A program never opens Sluice's event store: it holds no URL of it and no server token, only a
credential for its run's datasets that ends with the run (see services/datasets/run_credentials.py).
"""
from __future__ import annotations

import grpc

from sluice.client import SluiceClient
from sluice.datasets.store import IndexedPartition
from sluice.domain.consumer.state import ConsumerConfig, ConsumerRef, PartitionId, WorkItem
from sluice.domain.datasets.filters import PartitionFilter
from sluice.v1 import datasets_pb2 as pb
from sluice.v1 import datasets_pb2_grpc
from sluice.wire.common import timestamp_from_proto
from sluice.wire.datasets import config_to_proto, consumed_from_proto, filter_to_proto, partitions_from_proto

from .context import ApiAccess, ApiError

PAGE = 1000


class GrpcPartitions:
    """The PartitionsApi port (sluice.sdk.partitions) over gRPC."""

    def __init__(self, access: ApiAccess, timeout: float = 60.0) -> None:
        self._client = SluiceClient(access.address, timeout, token=access.token, tls_ca=access.tls_ca)
        self._stub = datasets_pb2_grpc.PartitionsStub(self._client.channel)
        self._timeout = timeout

    def dataset_exists(self, namespace: str, dataset: str) -> bool:
        try:
            self._stub.GetDataset(pb.GetDatasetRequest(namespace=namespace, name=dataset), timeout=self._timeout)
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.NOT_FOUND:
                return False
            raise _api_error(f"GetDataset {namespace}.{dataset}", error) from None
        return True

    def consume(self, ref: ConsumerRef, taker: str, limit: int, where: PartitionFilter,
                config: ConsumerConfig | None) -> list[WorkItem]:
        request = pb.ConsumeRequest(namespace=ref.namespace, dataset=ref.dataset, consumer=ref.name, taker=taker,
                                    limit=limit, where=filter_to_proto(where))
        if config is not None:
            request.config.CopyFrom(config_to_proto(config))
        try:
            response = self._stub.Consume(request, timeout=self._timeout)
        except grpc.RpcError as error:
            raise _api_error(f"Consume {ref.namespace}.{ref.dataset}", error) from None
        return [consumed_from_proto(item, f"partitions[{index}]") for index, item in enumerate(response.partitions)]

    def query(self, namespace: str, dataset: str, where: PartitionFilter, limit: int) -> list[IndexedPartition]:
        found: list[IndexedPartition] = []
        after = ""
        while len(found) < limit:
            request = pb.ListPartitionsRequest(namespace=namespace, dataset=dataset, where=filter_to_proto(where),
                                               after=after, limit=min(PAGE, limit - len(found)))
            try:
                response = self._stub.ListPartitions(request, timeout=self._timeout)
            except grpc.RpcError as error:
                raise _api_error(f"ListPartitions {namespace}.{dataset}", error) from None
            for item in response.partitions:
                (partition,) = partitions_from_proto([item.partition])
                found.append(IndexedPartition(PartitionId.parse(item.id), partition,
                                              timestamp_from_proto(item.committed_at)))
            if not (after := response.next_after):
                break
        return found

    def close(self) -> None:
        self._client.close()


def _api_error(call: str, error: grpc.RpcError) -> ApiError:
    return ApiError(f"{call}: {error.code().name}: {error.details()}")
