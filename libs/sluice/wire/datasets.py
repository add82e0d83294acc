"""Protobuf <-> domain for datasets, partitions, filters and consumers (sluice/v1/datasets.proto).

Conversion checks only what the proto cannot say (an unset enum, a malformed id); the domain
validates the rest and names fields by the same paths the request uses."""
from __future__ import annotations

from dataclasses import replace

from sluice.domain.consumer.state import ConsumerConfig, PartitionId, WorkItem
from sluice.domain.datasets.filters import KeyCondition, MetadataCondition, PartitionFilter
from sluice.domain.datasets.specs import DatasetSpec, KeySpec, KeyType, Partition
from sluice.domain.errors import InvalidArgument
from sluice.v1 import datasets_pb2 as pb
from sluice.v1 import notifications_pb2
from sluice.wire.common import timestamp_from_proto, timestamp_to_proto

_KEY_TYPES = {KeyType.STRING: pb.KEY_TYPE_STRING, KeyType.INT: pb.KEY_TYPE_INT, KeyType.DATE: pb.KEY_TYPE_DATE}
_FROM_KEY_TYPES = {value: key for key, value in _KEY_TYPES.items()}


def dataset_to_proto(spec: DatasetSpec, next_position: int = 0) -> pb.Dataset:
    return pb.Dataset(namespace=spec.namespace, name=spec.name,
                      partition_keys=[pb.PartitionKey(name=k.name, type=_KEY_TYPES[k.type]) for k in spec.partition_keys],
                      base_location=spec.base_location, description=spec.description, next_position=next_position)


def dataset_from_proto(message: pb.Dataset, path: str = "dataset") -> DatasetSpec:
    keys = []
    for index, key in enumerate(message.partition_keys):
        if key.type not in _FROM_KEY_TYPES:
            raise InvalidArgument(f"{path}.partition_keys[{index}].type", "must be one of KEY_TYPE_STRING, "
                                                                          "KEY_TYPE_INT, KEY_TYPE_DATE")
        keys.append(KeySpec(key.name, _FROM_KEY_TYPES[key.type]))
    return DatasetSpec(message.namespace, message.name, tuple(keys), message.base_location, message.description)


def partition_to_proto(partition: Partition) -> notifications_pb2.PartitionRef:
    return notifications_pb2.PartitionRef(
        key=[notifications_pb2.KeyValue(name=k, value=v) for k, v in partition.key.items()],
        location=partition.location, size_bytes=partition.size_bytes, record_count=partition.record_count,
        metadata=dict(partition.metadata))


def partitions_from_proto(messages, path: str = "partitions") -> tuple[Partition, ...]:
    result = []
    for index, message in enumerate(messages):
        names = [kv.name for kv in message.key]
        if len(set(names)) != len(names):
            raise InvalidArgument(f"{path}[{index}].key", f"names a key twice: {names}")
        result.append(Partition({kv.name: kv.value for kv in message.key}, message.location, message.size_bytes,
                                message.record_count, dict(message.metadata)))
    return tuple(result)


def filter_to_proto(where: PartitionFilter) -> pb.PartitionFilter:
    return pb.PartitionFilter(
        keys=[pb.KeyCondition(name=c.name, one_of=list(c.one_of), lower=c.lower, upper=c.upper) for c in where.keys],
        metadata=[pb.MetadataCondition(name=c.name, one_of=list(c.one_of)) for c in where.metadata])


def filter_from_proto(message: pb.PartitionFilter) -> PartitionFilter:
    return PartitionFilter(
        tuple(KeyCondition(c.name, tuple(c.one_of), c.lower if c.HasField("lower") else None,
                           c.upper if c.HasField("upper") else None) for c in message.keys),
        tuple(MetadataCondition(c.name, tuple(c.one_of)) for c in message.metadata))


def config_from_proto(message: pb.ConsumerConfig, base: ConsumerConfig) -> ConsumerConfig:
    """`base` with the fields the message sets (the consumer's current configuration, or the defaults)."""
    changes: dict = {name: getattr(message, name) for name in ("max_working_set", "max_retries", "timeout_seconds",
                                                               "history_size") if message.HasField(name)}
    if message.HasField("start"):
        changes["start"] = timestamp_from_proto(message.start, "config.start")
    if message.HasField("end"):
        changes["end"] = timestamp_from_proto(message.end, "config.end")
    if message.HasField("where"):
        changes["where"] = filter_from_proto(message.where)
    return replace(base, **changes)


def config_to_proto(config: ConsumerConfig) -> pb.ConsumerConfig:
    """Every field of `config` set (start and end when they are set), so the server applies it whole."""
    message = pb.ConsumerConfig(max_working_set=config.max_working_set, max_retries=config.max_retries,
                                timeout_seconds=config.timeout_seconds, history_size=config.history_size,
                                where=filter_to_proto(config.where))
    if config.start is not None:
        message.start.CopyFrom(timestamp_to_proto(config.start))
    if config.end is not None:
        message.end.CopyFrom(timestamp_to_proto(config.end))
    return message


def consumed_from_proto(message: pb.ConsumedPartition, path: str = "partitions") -> WorkItem:
    (partition,) = partitions_from_proto([message.partition], path)
    return WorkItem(PartitionId.parse(message.id, f"{path}.id"), partition,
                    timestamp_from_proto(message.committed_at, f"{path}.committed_at"), failures=message.failures)


def partition_id_from_text(text: str, path: str) -> PartitionId:
    return PartitionId.parse(text, path)


def consumed_to_proto(item: WorkItem) -> pb.ConsumedPartition:
    return pb.ConsumedPartition(id=str(item.id), partition=partition_to_proto(item.partition),
                                committed_at=timestamp_to_proto(item.committed_at), failures=item.failures)
