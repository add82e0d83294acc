"""A bus notification's event key, for the matcher's first stage (`lookup`), read from its protobuf
without converting the notification to the domain's: the lookup only routes it, forwarding its bytes
as they came, and the second stage converts them.

The bytes are refused as `sluice.wire.common.notification_from_bytes` refuses them, with the same
error (tests/unit/test_notification_key.py holds the two equal on hostile inputs), so a malformed
notification still goes to the dead-letter topic from the lookup, whether a schedule is interested or not.
A PartitionCommitted, nearly every notification, is checked by the conversion's own checks
(`check_partition_committed`) without being converted; another kind is converted as before.
"""
from __future__ import annotations

from google.protobuf.message import DecodeError

from sluice.bus.topics import partition_event_key
from sluice.domain.errors import InvalidArgument
from sluice.v1 import notifications_pb2 as pb
from sluice.wire.common import check_partition_committed, notification_from_proto, timestamp_from_proto

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
    check_partition_committed(committed, PARTITIONS)
    timestamp_from_proto(message.time, f"{PATH}.time")
    return partition_event_key(committed.namespace, committed.dataset)
