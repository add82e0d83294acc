"""Adding partitions is a transaction: begin (a position is reserved), then commit or abort, once.

Three kinds of streams per dataset, all owned by the launcher:

    dataset-<ns>.<name>                 DatasetCreated (the definition)
    transactions-<ns>.<name>            TransactionStarted, one per transaction; its version IS the position
    transaction-<ns>.<name>-<position>  PartitionsCommitted or TransactionAborted: the outcome, written once

Partitions are indexed by the position of their transaction (seed 003's write pointer): it is
known from the moment the transaction begins, so a commit sequence written ahead can name exactly
where its partitions will be registered. Transactions commit in any order; a reader of positions
below the next free one may find some still open, and must come back for them later (the partition
consumer keeps them as in flight). A commit is one event: the partition notification of the transaction.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime

from sluice.domain import bounds
from sluice.domain.datasets.specs import DatasetSpec, Partition, validate_partition
from sluice.domain.errors import AlreadyExists, FailedPrecondition, InvalidArgument, ResourceExhausted

MAX_PARTITIONS_PER_TRANSACTION = bounds.MAX_PARTITIONS_PER_REQUEST


def dataset_stream(namespace: str, name: str) -> str:
    return f"dataset-{namespace}.{name}"


def positions_stream(namespace: str, name: str) -> str:
    return f"transactions-{namespace}.{name}"


def transaction_stream(namespace: str, name: str, position: int) -> str:
    return f"transaction-{namespace}.{name}-{position}"


# Events
@dataclass(frozen=True)
class DatasetCreated:
    spec: DatasetSpec
    at: datetime


@dataclass(frozen=True)
class TransactionStarted:
    namespace: str
    dataset: str
    position: int
    owner: str
    """Who writes in it (a run id, a producer's name); for operators."""
    at: datetime


@dataclass(frozen=True)
class PartitionsCommitted:
    namespace: str
    dataset: str
    position: int
    partitions: tuple[Partition, ...]
    at: datetime


@dataclass(frozen=True)
class TransactionAborted:
    namespace: str
    dataset: str
    position: int
    reason: str
    at: datetime


DATASET_EVENTS = (DatasetCreated,)
TRANSACTION_EVENTS = (TransactionStarted, PartitionsCommitted, TransactionAborted)


class TransactionStatus(enum.Enum):
    """Where a transaction stands for a reader of the index."""

    OPEN = "OPEN"
    """Begun, neither committed nor aborted yet: its partitions may still appear."""
    COMMITTED = "COMMITTED"
    """Its partitions are in the index, for good."""
    ABORTED = "ABORTED"
    """It added nothing, and never will."""


@dataclass(frozen=True)
class Transaction:
    """One position of the index as a reader sees it."""

    position: int
    status: TransactionStatus
    partitions: tuple[Partition, ...] = ()
    committed_at: datetime | None = None
    reason: str = ""


def outcome_of(position: int, events: list[object]) -> Transaction:
    """The transaction at `position` from the events of its outcome stream (none: still open)."""
    for event in events:
        match event:
            case PartitionsCommitted(_, _, _, partitions, at):
                return Transaction(position, TransactionStatus.COMMITTED, partitions, at)
            case TransactionAborted(_, _, _, reason, _):
                return Transaction(position, TransactionStatus.ABORTED, reason=reason)
    return Transaction(position, TransactionStatus.OPEN)


# Decisions
def decide_create(existing: DatasetSpec | None, spec: DatasetSpec, now: datetime) -> list[DatasetCreated]:
    if existing is not None:
        if existing == spec:
            return []
        raise AlreadyExists(f"dataset {spec.qualified_name} exists already with another definition")
    return [DatasetCreated(spec, now)]


def validate_partitions(spec: DatasetSpec, partitions: tuple[Partition, ...] | list[Partition],
                        path: str = "partitions") -> tuple[Partition, ...]:
    """Every partition made canonical; InvalidArgument names the first offending field."""
    if not partitions:
        raise InvalidArgument(path, "a transaction commits at least one partition")
    if len(partitions) > MAX_PARTITIONS_PER_TRANSACTION:
        raise ResourceExhausted(path, f"{len(partitions)} partitions exceed the limit of "
                                      f"{MAX_PARTITIONS_PER_TRANSACTION} per transaction")
    total = 0
    checked: list[Partition] = []
    first_index: dict[tuple, int] = {}
    for index, partition in enumerate(partitions):
        if not isinstance(partition, Partition):
            raise InvalidArgument(f"{path}[{index}]", f"must be a Partition, got {type(partition).__name__}")
        total += _check_partition_sizes(partition, f"{path}[{index}]")
        if total > bounds.MAX_PARTITIONS_BYTES:
            raise ResourceExhausted(path, f"over {bounds.MAX_PARTITIONS_BYTES} bytes of keys, locations and "
                                          f"metadata: exceeds the limit of {bounds.MAX_PARTITIONS_BYTES} bytes "
                                          f"per transaction (its notification must fit a bus message)")
        valid = validate_partition(spec, partition, f"{path}[{index}]")
        identity = tuple(valid.key.values())
        if identity in first_index:
            raise InvalidArgument(f"{path}[{index}].key", f"repeats the key of {path}[{first_index[identity]}]")
        first_index[identity] = index
        checked.append(valid)
    return tuple(checked)


def _check_partition_sizes(partition: Partition, path: str) -> int:
    """The partition's bytes (key values, location, metadata, UTF-8), each part within its limit."""
    key, metadata = partition.key, partition.metadata or {}
    if isinstance(key, dict) and len(key) > bounds.MAX_KEYS:
        raise ResourceExhausted(f"{path}.key", f"{len(key)} key values exceed the limit of {bounds.MAX_KEYS}")
    size = 0
    for name, value in (key.items() if isinstance(key, dict) else ()):
        if isinstance(value, str):
            bounds.check_size(f"{path}.key.{name}", bounds.utf8_size(value), bounds.MAX_KEY_VALUE_BYTES)
            size += bounds.utf8_size(value) + bounds.utf8_size(str(name))
    if isinstance(partition.location, str):
        bounds.check_size(f"{path}.location", bounds.utf8_size(partition.location), bounds.MAX_LOCATION_BYTES)
        size += bounds.utf8_size(partition.location)
    if isinstance(metadata, dict):
        meta = sum(bounds.utf8_size(k) + bounds.utf8_size(v) for k, v in metadata.items()
                   if isinstance(k, str) and isinstance(v, str))
        bounds.check_size(f"{path}.metadata", meta, bounds.MAX_METADATA_BYTES)
        size += meta
    for name in ("size_bytes", "record_count"):
        value = getattr(partition, name)
        if isinstance(value, int) and value > bounds.MAX_BYTES:
            raise InvalidArgument(f"{path}.{name}", f"must be at most {bounds.MAX_BYTES} (range 0 to "
                                                    f"{bounds.MAX_BYTES}), got {value}")
    return size


def decide_commit(spec: DatasetSpec, current: Transaction, partitions: tuple[Partition, ...],
                  now: datetime) -> list[PartitionsCommitted]:
    """Commit once. The same commit again is a no-op (a redone commit step); anything else conflicts."""
    checked = validate_partitions(spec, partitions)
    if current.status is TransactionStatus.COMMITTED:
        if current.partitions == checked:
            return []
        raise FailedPrecondition(f"transaction {current.position} of {spec.qualified_name} is already committed "
                                 "with other partitions")
    if current.status is TransactionStatus.ABORTED:
        raise FailedPrecondition(f"transaction {current.position} of {spec.qualified_name} was aborted "
                                 f"({current.reason}); it cannot commit")
    return [PartitionsCommitted(spec.namespace, spec.name, current.position, checked, now)]


def decide_abort(spec: DatasetSpec, current: Transaction, reason: str, now: datetime) -> list[TransactionAborted]:
    if current.status is TransactionStatus.ABORTED:
        return []
    if current.status is TransactionStatus.COMMITTED:
        raise FailedPrecondition(f"transaction {current.position} of {spec.qualified_name} is committed; "
                                 "it cannot abort")
    return [TransactionAborted(spec.namespace, spec.name, current.position, reason or "aborted", now)]
