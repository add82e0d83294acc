"""gRPC edge of the datasets service (sluice/v1/datasets.proto): Partitions, for clients and the
programs (with their run credentials), and RunData, for the launcher."""
from __future__ import annotations

import json

import grpc

from sluice.datasets.store import PartitionQuery
from sluice.domain import bounds
from sluice.domain.consumer.serialization import state_to_bytes, state_to_json
from sluice.domain.consumer.state import ConsumerConfig, ConsumerRef, PartitionId
from sluice.domain.datasets.run_access import AccessGrant, validate_run_id
from sluice.datasets.files import PublishError
from sluice.domain.errors import FailedPrecondition, InvalidArgument, NotFound
from sluice.runtime.grpc_security import CALLER
from sluice.runtime.grpc_server import GrpcBinding, grpc_errors
from sluice.v1 import datasets_pb2 as pb
from sluice.v1 import datasets_pb2_grpc
from sluice.wire.common import partition_to_proto as partition_ref_to_proto
from sluice.wire.common import timestamp_from_proto, timestamp_to_proto
from sluice.wire.datasets import (
    config_from_proto,
    consumed_to_proto,
    dataset_from_proto,
    dataset_to_proto,
    filter_from_proto,
    partition_to_proto,
    partitions_from_proto,
)
from sluice_services.datasets.run_credentials import RunCredentials, run_of
from sluice_services.datasets.run_outputs import RunPublisher
from sluice_services.datasets.service import DatasetsService


class PartitionsServicer(datasets_pb2_grpc.PartitionsServicer):
    def __init__(self, service: DatasetsService) -> None:
        self._service = service
        self._datasets = service.datasets
        self._consumers = service.consumers

    # -- datasets ------------------------------------------------------------------------------

    @grpc_errors
    async def CreateDataset(self, request, context):
        if not request.HasField("dataset"):
            raise InvalidArgument("dataset", "is required")
        spec = self._datasets.create(dataset_from_proto(request.dataset))
        return self._dataset(spec.namespace, spec.name)

    @grpc_errors
    async def GetDataset(self, request, context):
        return self._dataset(request.namespace, request.name)

    @grpc_errors
    async def ListDatasets(self, request, context):
        return pb.ListDatasetsResponse(datasets=[self._dataset(s.namespace, s.name)
                                                 for s in self._datasets.list(request.namespace)])

    def _dataset(self, namespace: str, name: str) -> pb.Dataset:
        spec = self._datasets.get(namespace, name)
        return dataset_to_proto(spec, self._datasets.next_position(namespace, name))

    # -- transactions --------------------------------------------------------------------------

    @grpc_errors
    async def AddPartitions(self, request, context):
        transaction = self._datasets.add(request.namespace, request.dataset,
                                         partitions_from_proto(request.partitions), request.owner)
        return pb.TransactionResponse(position=transaction.position, status=transaction.status.value)

    @grpc_errors
    async def BeginTransaction(self, request, context):
        position = self._datasets.begin(request.namespace, request.dataset, request.owner)
        return pb.TransactionResponse(position=position, status="OPEN")

    @grpc_errors
    async def CommitTransaction(self, request, context):
        transaction = self._datasets.commit(request.namespace, request.dataset, request.position,
                                            partitions_from_proto(request.partitions))
        return pb.TransactionResponse(position=transaction.position, status=transaction.status.value)

    @grpc_errors
    async def AbortTransaction(self, request, context):
        transaction = self._datasets.abort(request.namespace, request.dataset, request.position, request.reason)
        return pb.TransactionResponse(position=transaction.position, status=transaction.status.value)

    @grpc_errors
    async def ListPartitions(self, request, context):
        limit = request.limit or bounds.MAX_PARTITIONS_LISTED
        bounds.check_int("limit", limit, 1, bounds.MAX_PARTITIONS_LISTED)
        query = PartitionQuery(
            where=filter_from_proto(request.where),
            committed_after=timestamp_from_proto(request.committed_after, "committed_after") if request.HasField("committed_after")
            else None,
            committed_before=timestamp_from_proto(request.committed_before, "committed_before") if request.HasField("committed_before")
            else None,
            after=PartitionId.parse(request.after, "after") if request.after else None,
            limit=limit)
        found = self._datasets.query(request.namespace, request.dataset, query)
        return pb.ListPartitionsResponse(
            partitions=[pb.IndexedPartition(id=str(p.id), partition=partition_to_proto(p.partition),
                                            committed_at=timestamp_to_proto(p.committed_at)) for p in found],
            next_after=str(found[-1].id) if len(found) == limit else "")

    # -- consumers -----------------------------------------------------------------------------

    @grpc_errors
    async def Consume(self, request, context):
        run_id = run_of(CALLER.get())
        if run_id is not None and request.taker != run_id:   # a program takes partitions for its own run only
            await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                f"run:{run_id} takes partitions as taker {run_id!r} only, not {request.taker!r}")
        ref = ConsumerRef(request.namespace, request.dataset, request.consumer)
        config = None
        if request.HasField("config"):
            current = self._consumers.find(ref)
            config = config_from_proto(request.config, current.config if current else ConsumerConfig())
        items = self._consumers.consume(ref, request.taker, request.limit, filter_from_proto(request.where),
                                        request.own_position if request.HasField("own_position") else None, config)
        return pb.ConsumeResponse(partitions=[consumed_to_proto(item) for item in items])

    @grpc_errors
    async def FinishPartitions(self, request, context):
        ref = ConsumerRef(request.namespace, request.dataset, request.consumer)
        ids = [PartitionId.parse(text, f"ids[{index}]") for index, text in enumerate(request.ids)]
        if request.outcome == pb.FINISH_COMPLETE:
            completed = self._consumers.complete(ref, request.taker, ids)
            return pb.FinishPartitionsResponse(completed=[str(i) for i in completed])
        if request.outcome == pb.FINISH_FAIL:
            self._consumers.fail(ref, request.taker, ids, request.reason)
        elif request.outcome == pb.FINISH_UNTAKE:
            self._consumers.untake(ref, request.taker, ids)
        else:
            raise InvalidArgument("outcome", "must be FINISH_COMPLETE, FINISH_FAIL or FINISH_UNTAKE")
        return pb.FinishPartitionsResponse()

    @grpc_errors
    async def GetConsumer(self, request, context):
        state = self._consumers.state(ConsumerRef(request.namespace, request.dataset, request.consumer))
        return pb.ConsumerStateResponse(json=json.dumps(state_to_json(state), indent=2), state=state_to_bytes(state))

    @grpc_errors
    async def ConsumeWithState(self, request, context):
        items, state = self._consumers.consume_with_state(request.consumer_state, request.taker, request.limit,
                                                          filter_from_proto(request.where))
        return pb.ConsumeWithStateResponse(partitions=[consumed_to_proto(item) for item in items],
                                           consumer_state=state)

    # -- commit sequences ----------------------------------------------------------------------

    @grpc_errors
    async def ListCommitSequences(self, request, context):
        found = self._service.commits.sequences()
        if request.unfinished_only:
            found = [p for p in found if p.status.value in ("PENDING", "QUARANTINED")]
        return pb.ListCommitSequencesResponse(sequences=[_sequence(p) for p in found])

    @grpc_errors
    async def ReleaseCommitSequence(self, request, context):
        if self._service.commits.progress(request.id) is None:
            raise NotFound(f"commit sequence {request.id} does not exist")
        return _sequence(self._service.commits.release(request.id))


def _sequence(progress) -> pb.CommitSequenceStatus:
    sequence = progress.sequence
    return pb.CommitSequenceStatus(id=sequence.id, run_id=sequence.run_id, datasets=list(sequence.datasets),
                                   status=progress.status.value, steps=len(sequence.steps),
                                   steps_done=len(progress.done), failures=progress.failures, error=progress.error)


class RunDataServicer(datasets_pb2_grpc.RunDataServicer):
    """What the launcher asks for the runs it launches. Publishing and releasing end the run's access."""

    def __init__(self, service: DatasetsService, publisher: RunPublisher, credentials: RunCredentials) -> None:
        self._service = service
        self._publisher = publisher
        self._credentials = credentials

    @grpc_errors
    async def OpenRun(self, request, context):
        grants = tuple(AccessGrant(grant.namespace, tuple(grant.datasets)) for grant in request.grants)
        access = self._service.open_access(request.run_id, grants, request.attempt)
        return pb.OpenRunResponse(token=self._credentials.issue(access.run_id, access.attempt))

    @grpc_errors
    async def PublishRun(self, request, context):
        validate_run_id(request.run_id)
        result = _json(request.result_json, "result_json", dict)
        try:
            outputs = self._publisher.publish(request.run_id, result, request.attempt)  # its access ends with it
        except PublishError as refused:  # the launcher fails the run with this message
            raise FailedPrecondition(str(refused)) from refused
        return pb.PublishRunResponse(outputs=_published(outputs))

    @grpc_errors
    async def ReleaseRun(self, request, context):
        validate_run_id(request.run_id)
        taken = _json(request.consumed_json, "consumed_json", list) if request.consumed_json else []
        published = self._publisher.release(request.run_id, taken, request.reason, request.attempt)
        if published is None:
            return pb.ReleaseRunResponse()
        return pb.ReleaseRunResponse(published=True, outputs=_published(published))


def _published(outputs) -> list[pb.PublishedOutput]:
    return [pb.PublishedOutput(namespace=o.namespace, dataset=o.dataset, partition=partition_ref_to_proto(o.partition),
                               announced=o.announced) for o in outputs]


def _json(text: str, field: str, kind: type) -> object:
    try:
        value = json.loads(text)
    except ValueError as error:
        raise InvalidArgument(field, f"is not JSON: {error}") from None
    if not isinstance(value, kind):
        raise InvalidArgument(field, f"must be a JSON {'object' if kind is dict else 'array'}")
    return value


def bindings(service: DatasetsService, publisher: RunPublisher | None = None,
             credentials: RunCredentials | None = None) -> list[GrpcBinding]:
    """Partitions; with a publisher and the credentials it issues, RunData too."""
    found = [GrpcBinding(pb.DESCRIPTOR.services_by_name["Partitions"].full_name,
                         datasets_pb2_grpc.add_PartitionsServicer_to_server, PartitionsServicer(service))]
    if publisher is not None and credentials is not None:
        found.append(GrpcBinding(pb.DESCRIPTOR.services_by_name["RunData"].full_name,
                                 datasets_pb2_grpc.add_RunDataServicer_to_server,
                                 RunDataServicer(service, publisher, credentials)))
    return found
