"""The program's partition consumers (no pyspark here): take new partitions for this run and remember them.

    source = PartitionSource(context)
    taken = source.take("clickstream", limit=24, where={"marketplace": "US", "hour": Between(8, 12)})
    source.consumed_document()      # what result.json lists under "consumed"

Partitions come from the datasets service's Partitions API (context.json system.api: its address and the
run's own credential; see sluice.sdk.api), never from Sluice's event store directly.
The run is the taker (its run id), the consumer is named after the program unless given. What was
taken is also written at once to consumed.json beside result.json: if the program dies, the launcher
still knows which partitions to mark failed (they are retried); if it succeeds, the launcher's
commit sequence completes them together with publishing the outputs.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

from sluice.domain.consumer.state import ConsumerConfig, ConsumerRef, WorkItem
from sluice.domain.datasets.filters import KeyCondition, MetadataCondition, PartitionFilter

from .context import ApiAccess, ApiError, ProgramContext

if TYPE_CHECKING:
    from sluice.datasets.store import IndexedPartition

CONSUMED_FILE = "consumed.json"


class ConsumeError(RuntimeError):
    """A consume call that cannot be served; the message names the cause (unknown dataset, bad filter...)."""


@dataclass(frozen=True)
class Between:
    """A half-open range of key values for `where`: lower <= value < upper (either may be None)."""

    lower: object = None
    upper: object = None


@dataclass(frozen=True)
class ConsumedPartition:
    namespace: str
    dataset: str
    consumer: str
    id: str
    key: Mapping[str, str]
    location: str
    size_bytes: int
    record_count: int
    metadata: Mapping[str, str]
    failures: int


@dataclass(frozen=True)
class DatasetPartition:
    namespace: str
    dataset: str
    id: str
    key: Mapping[str, str]
    location: str
    size_bytes: int
    record_count: int
    metadata: Mapping[str, str]


def filter_from_mapping(where: Mapping[str, Any] | PartitionFilter | None,
                        metadata: Mapping[str, Any] | None = None) -> PartitionFilter:
    """{"marketplace": "US", "hour": Between(8, 12), "date": ["2026-11-22", "2026-11-23"]} as a filter."""
    if isinstance(where, PartitionFilter):
        return where
    keys = []
    for name, value in (where or {}).items():
        if isinstance(value, Between):
            keys.append(KeyCondition(name, (), _text(value.lower), _text(value.upper)))
        elif isinstance(value, (list, tuple, set, frozenset)):
            keys.append(KeyCondition(name, tuple(_text(v) for v in value)))
        else:
            keys.append(KeyCondition(name, (_text(value),)))
    conditions = tuple(MetadataCondition(name, () if value is None else (str(value),))
                       for name, value in (metadata or {}).items())
    return PartitionFilter(tuple(keys), conditions)


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def default_consumer_name(context: ProgramContext) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"{context.program.app}_{context.program.program}")


class PartitionsApi(Protocol):
    """What the partition source asks of Sluice (a fake in tests)."""

    def dataset_exists(self, namespace: str, dataset: str) -> bool: ...

    def consume(self, ref: ConsumerRef, taker: str, limit: int, where: PartitionFilter,
                config: ConsumerConfig | None) -> list[WorkItem]: ...

    def query(self, namespace: str, dataset: str, where: PartitionFilter, limit: int) -> list[IndexedPartition]: ...

    def close(self) -> None: ...


def grpc_api(access: ApiAccess) -> PartitionsApi:
    from .api import GrpcPartitions   # grpc only when a program consumes

    return GrpcPartitions(access)


class PartitionSource:
    """`connect`: the API client for the context's system.api (a fake in tests)."""

    def __init__(self, context: ProgramContext,
                 connect: Callable[[ApiAccess], PartitionsApi] = grpc_api) -> None:
        self._context = context
        self._connect = connect
        self._api: PartitionsApi | None = None
        self._taken: dict[tuple[str, str, str], list[str]] = {}

    def take(self, dataset: str, limit: int = 1000, where: Mapping[str, Any] | PartitionFilter | None = None, *,
             metadata: Mapping[str, Any] | None = None, namespace: str | None = None, consumer: str | None = None,
             config: ConsumerConfig | None = None) -> list[ConsumedPartition]:
        namespace = namespace or self._context.program.namespace
        name = consumer or default_consumer_name(self._context)
        ref = ConsumerRef(namespace, dataset, name)
        try:
            items = self._client().consume(ref, self._context.run_id, limit, filter_from_mapping(where, metadata),
                                           config)
        except ApiError as error:
            raise ConsumeError(str(error)) from None   # it names the call and the server's reason
        taken = [_consumed(ref, item) for item in items]
        if taken:
            self._taken.setdefault((namespace, dataset, name), []).extend(p.id for p in taken)
            self._write_sidecar()
        return taken

    def knows(self, dataset: str, namespace: str | None = None) -> bool:
        """Whether the dataset is registered (partitions can be consumed or queried)."""
        if self._context.system.api is None:
            return False
        namespace = namespace or self._context.program.namespace
        try:
            return self._client().dataset_exists(namespace, dataset)
        except ApiError as error:
            raise ConsumeError(str(error)) from None   # it names the call and the server's reason

    def partitions(self, dataset: str, where: Mapping[str, Any] | PartitionFilter | None = None, *,
                   metadata: Mapping[str, Any] | None = None, namespace: str | None = None,
                   limit: int = 10_000) -> list[DatasetPartition]:
        """The dataset's committed partitions that match (a query, not consuming): the latest one of
        each key, in position order."""
        namespace = namespace or self._context.program.namespace
        try:
            found = self._client().query(namespace, dataset, filter_from_mapping(where, metadata), limit)
        except ApiError as error:
            raise ConsumeError(str(error)) from None   # it names the call and the server's reason
        latest = {tuple(p.partition.key.values()): p for p in found}
        return [DatasetPartition(namespace, dataset, str(p.id), dict(p.partition.key), p.partition.location,
                                 p.partition.size_bytes, p.partition.record_count, dict(p.partition.metadata))
                for p in sorted(latest.values(), key=lambda p: p.id)]

    def consumed_document(self) -> list[dict[str, Any]]:
        return [{"namespace": ns, "dataset": ds, "consumer": consumer, "ids": list(ids)}
                for (ns, ds, consumer), ids in self._taken.items()]

    def close(self) -> None:
        if self._api is not None:
            self._api.close()
            self._api = None

    def _client(self) -> PartitionsApi:
        if self._api is None:
            access = self._context.system.api
            if access is None:
                raise ConsumeError("this run's context has no system.api: consuming partitions needs a "
                                   "program launched by a Sluice with datasets")
            self._api = self._connect(access)
        return self._api

    def _write_sidecar(self) -> None:
        path = Path(self._context.system.result_path).with_name(CONSUMED_FILE)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(self.consumed_document(), handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)


def _consumed(ref: ConsumerRef, item: WorkItem) -> ConsumedPartition:
    p = item.partition
    return ConsumedPartition(ref.namespace, ref.dataset, ref.name, str(item.id), dict(p.key), p.location,
                             p.size_bytes, p.record_count, dict(p.metadata), item.failures)
