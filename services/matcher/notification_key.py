"""A bus notification's event key, for the matcher's first stage (`lookup`), read from its protobuf
without converting the notification to the domain's: the lookup only routes it, forwarding its bytes
as they came, and the second stage converts them.

The bytes are refused as `sluice.wire.common.notification_from_bytes` refuses them, with the same
error (tests/unit/test_notification_key.py holds the two equal on hostile inputs), so a malformed
notification still goes to the dead-letter topic from the lookup, whether a schedule is interested or not.
Only a PartitionCommitted, nearly every notification, is checked here field by field; another kind
is converted as before.
"""
from __future__ import annotations

from google.protobuf.message import DecodeError

from sluice.bus.topics import partition_event_key
from sluice.domain.bounds import MAX_BYTES, MAX_NOTIFICATION_BYTES, MAX_PARTITIONS_PER_REQUEST
from sluice.domain.errors import InvalidArgument, ResourceExhausted
from sluice.v1 import notifications_pb2 as pb
from sluice.wire.common import notification_from_proto, timestamp_from_proto

PATH = "notification"
PARTITIONS = f"{PATH}.partition_committed"


def notification_event_key(data: bytes) -> str:
    """The event key of the notification `data` encodes; InvalidArgument (or ResourceExhausted) names
    the first offending field."""
    message = pb.Notification()
    try:
        message.ParseFromString(data)
    except DecodeError as error:
        raise InvalidArgument(PATH, f"not a protobuf Notification ({error})") from error
    if message.WhichOneof("payload") != "partition_committed":
        return notification_from_proto(message, PATH).event_key()
    if not message.id:
        raise InvalidArgument(f"{PATH}.id", "must not be empty")
    if not message.HasField("time"):
        raise InvalidArgument(f"{PATH}.time", "is required")
    committed = message.partition_committed
    _check_partitions(committed)
    timestamp_from_proto(message.time, f"{PATH}.time")
    return partition_event_key(committed.namespace, committed.dataset)


def _check_partitions(message: pb.PartitionCommitted) -> None:
    _require(f"{PARTITIONS}.namespace", message.namespace)
    _require(f"{PARTITIONS}.dataset", message.dataset)
    partitions = message.partitions
    if not partitions:
        raise InvalidArgument(f"{PARTITIONS}.partitions", "at least one partition is required")
    if len(partitions) > MAX_PARTITIONS_PER_REQUEST:
        raise ResourceExhausted(f"{PARTITIONS}.partitions", f"{len(partitions)} partitions exceed the limit of "
                                                            f"{MAX_PARTITIONS_PER_REQUEST} per notification")
    if (size := message.ByteSize()) > MAX_NOTIFICATION_BYTES:
        raise ResourceExhausted(f"{PARTITIONS}.partitions", f"{size} bytes exceed the limit of "
                                                            f"{MAX_NOTIFICATION_BYTES} bytes per notification")
    for index, partition in enumerate(partitions):
        where = f"{PARTITIONS}.partitions[{index}]"
        if not partition.key:
            raise InvalidArgument(f"{where}.key", "must have at least one key value")
        names = [kv.name for kv in partition.key]
        if any(not name.strip() for name in names) or len(set(names)) != len(names):
            raise InvalidArgument(f"{where}.key", f"key names must be non-empty and unique, got {names}")
        _require(f"{where}.location", partition.location)
        if not 0 <= partition.size_bytes <= MAX_BYTES:
            raise InvalidArgument(f"{where}.size_bytes",
                                  f"must be between 0 and {MAX_BYTES}, got {partition.size_bytes}")
        if not 0 <= partition.record_count <= MAX_BYTES:
            raise InvalidArgument(f"{where}.record_count",
                                  f"must be between 0 and {MAX_BYTES}, got {partition.record_count}")


def _require(path: str, value: str) -> None:
    if not value.strip():
        raise InvalidArgument(path, "must not be empty")
