from __future__ import annotations

import sys
from datetime import datetime, timedelta, timezone
from typing import TypeVar

from google.protobuf import timestamp_pb2
from google.protobuf.message import DecodeError, Message

from sluice.domain.common import (
    Notification,
    PartitionCommitted,
    PartitionRef,
    ProgramRef,
    ProgramStatusChanged,
    RunStatus,
)
from sluice.domain.bounds import (
    EARLIEST_SECONDS,
    LATEST_SECONDS,
    MAX_BYTES,
    MAX_NOTIFICATION_BYTES,
    MAX_PARTITIONS_PER_REQUEST,
    check_timestamp_seconds,
)
from sluice.domain.errors import InvalidArgument, ResourceExhausted
from sluice.runtime.errors import MalformedMessage
from sluice.v1 import notifications_pb2 as pb


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def timestamp_to_proto(when: datetime | None) -> timestamp_pb2.Timestamp | None:
    """Timestamp.FromDatetime's result, in a fifth of its time (every job and notification carries a few)."""
    if when is None:
        return None
    since = when - _EPOCH if when.tzinfo is not None else when.astimezone(timezone.utc) - _EPOCH
    return timestamp_pb2.Timestamp(seconds=since.days * 86_400 + since.seconds, nanos=since.microseconds * 1000)


def timestamp_from_proto(stamp: timestamp_pb2.Timestamp, path: str = "timestamp") -> datetime:
    """Timestamp.ToDatetime(tzinfo=UTC)'s result, without its per-call conversions. A time outside
    bounds.EARLIEST_TIME..LATEST_TIME is an InvalidArgument naming `path` (it would overflow date
    arithmetic later, or here). The times of a burst of jobs are few: they are shared, not made each."""
    key = (stamp.seconds, stamp.nanos)
    when = _TIMES.get(key)
    if when is None:
        if not EARLIEST_SECONDS <= stamp.seconds < LATEST_SECONDS or not 0 <= stamp.nanos <= 999_999_999:
            check_timestamp_seconds(path, stamp.seconds, stamp.nanos)
        if len(_TIMES) >= _TIMES_KEPT:
            _TIMES.clear()
        when = _TIMES[key] = _EPOCH + timedelta(seconds=stamp.seconds, microseconds=stamp.nanos // 1000)
    return when


_TIMES: dict[tuple[int, int], datetime] = {}
_TIMES_KEPT = 1024


def program_to_proto(program: ProgramRef) -> pb.ProgramRef:
    return pb.ProgramRef(namespace=program.namespace, app=program.app, program=program.program)


def program_from_proto(message: pb.ProgramRef) -> ProgramRef:
    # shared: thousands of schedules and jobs name the same few programs
    key = (message.namespace, message.app, message.program)
    program = _PROGRAMS.get(key)
    if program is None:
        if len(_PROGRAMS) >= _PROGRAMS_KEPT:
            _PROGRAMS.clear()
        program = _PROGRAMS[key] = ProgramRef(sys.intern(key[0]), sys.intern(key[1]), sys.intern(key[2]))
    return program


_PROGRAMS: dict[tuple[str, str, str], ProgramRef] = {}
_PROGRAMS_KEPT = 10_000


def partition_to_proto(partition: PartitionRef) -> pb.PartitionRef:
    return pb.PartitionRef(
        key=[pb.KeyValue(name=k, value=v) for k, v in partition.key.items()],
        location=partition.location,
        size_bytes=partition.size_bytes,
        record_count=partition.record_count,
        metadata=dict(partition.metadata),
    )


def partition_from_proto(message: pb.PartitionRef) -> PartitionRef:
    return PartitionRef({kv.name: kv.value for kv in message.key}, message.location, message.size_bytes, message.record_count,
                        dict(message.metadata))


def notification_to_proto(notification: Notification) -> pb.Notification:
    message = pb.Notification(id=notification.id, time=timestamp_to_proto(notification.time))
    payload = notification.payload
    if isinstance(payload, PartitionCommitted):
        message.partition_committed.CopyFrom(pb.PartitionCommitted(
            namespace=payload.namespace, dataset=payload.dataset,
            partitions=[partition_to_proto(p) for p in payload.partitions]))
    else:
        message.program_status_changed.CopyFrom(pb.ProgramStatusChanged(
            program=program_to_proto(payload.program), run_id=payload.run_id,
            status=pb.RunStatus.Value(payload.status.value), schedule_id=payload.schedule_id,
            job_id=payload.job_id))
    return message


def notification_from_proto(message: pb.Notification, path: str = "notification") -> Notification:
    """Validate and convert; InvalidArgument names the first offending field."""
    if not message.id:
        raise InvalidArgument(f"{path}.id", "must not be empty")
    if not message.HasField("time"):
        raise InvalidArgument(f"{path}.time", "is required")
    kind = message.WhichOneof("payload")
    if kind == "partition_committed":
        payload = _partition_committed_from_proto(message.partition_committed, f"{path}.partition_committed")
    elif kind == "program_status_changed":
        payload = _program_status_from_proto(message.program_status_changed, f"{path}.program_status_changed")
    else:
        raise InvalidArgument(f"{path}.payload", "must be one of partition_committed, program_status_changed")
    return Notification(message.id, timestamp_from_proto(message.time, f"{path}.time"), payload)


M = TypeVar("M", bound=Message)


def parse_bus_message(message_type: type[M], data: bytes) -> M:
    """Decode a bus message; bytes that are not one are a MalformedMessage (dead-lettered)."""
    try:
        return message_type.FromString(data)
    except DecodeError as error:
        raise MalformedMessage(f"not a {message_type.DESCRIPTOR.name} message: {error}") from error


def notification_from_bytes(data: bytes) -> Notification:
    message = pb.Notification()
    try:
        message.ParseFromString(data)
    except DecodeError as error:
        raise InvalidArgument("notification", f"not a protobuf Notification ({error})") from error
    return notification_from_proto(message)


def _partition_committed_from_proto(message: pb.PartitionCommitted, path: str) -> PartitionCommitted:
    check_partition_committed(message, path)
    return PartitionCommitted(message.namespace, message.dataset,
                              tuple(partition_from_proto(partition) for partition in message.partitions))


def check_partition_committed(message: pb.PartitionCommitted, path: str) -> None:
    """What `notification_from_proto` refuses of a PartitionCommitted (InvalidArgument or ResourceExhausted
    naming the first offending field), without converting it (the matcher's lookup only routes it)."""
    _require(f"{path}.namespace", message.namespace)
    _require(f"{path}.dataset", message.dataset)
    if not message.partitions:
        raise InvalidArgument(f"{path}.partitions", "at least one partition is required")
    if len(message.partitions) > MAX_PARTITIONS_PER_REQUEST:
        raise ResourceExhausted(f"{path}.partitions", f"{len(message.partitions)} partitions exceed the limit of "
                                                      f"{MAX_PARTITIONS_PER_REQUEST} per notification")
    if (size := message.ByteSize()) > MAX_NOTIFICATION_BYTES:
        raise ResourceExhausted(f"{path}.partitions", f"{size} bytes exceed the limit of {MAX_NOTIFICATION_BYTES} "
                                                      f"bytes per notification")
    for index, partition in enumerate(message.partitions):
        where = f"{path}.partitions[{index}]"
        if not partition.key:
            raise InvalidArgument(f"{where}.key", "must have at least one key value")
        names = [kv.name for kv in partition.key]
        if any(not name.strip() for name in names) or len(set(names)) != len(names):
            raise InvalidArgument(f"{where}.key", f"key names must be non-empty and unique, got {names}")
        _require(f"{where}.location", partition.location)
        if not 0 <= partition.size_bytes <= MAX_BYTES:
            raise InvalidArgument(f"{where}.size_bytes", f"must be between 0 and {MAX_BYTES}, got {partition.size_bytes}")
        if not 0 <= partition.record_count <= MAX_BYTES:
            raise InvalidArgument(f"{where}.record_count",
                                  f"must be between 0 and {MAX_BYTES}, got {partition.record_count}")


def _program_status_from_proto(message: pb.ProgramStatusChanged, path: str) -> ProgramStatusChanged:
    for name in ("namespace", "app", "program"):
        _require(f"{path}.program.{name}", getattr(message.program, name))
    _require(f"{path}.run_id", message.run_id)
    if message.status == pb.RUN_STATUS_UNSPECIFIED:
        raise InvalidArgument(f"{path}.status", "is required")
    try:
        status = RunStatus(pb.RunStatus.Name(message.status))
    except ValueError:  # a number no RunStatus has (an open enum keeps it)
        raise InvalidArgument(f"{path}.status", f"unknown run status {message.status} "
                                                f"(one of {', '.join(s.value for s in RunStatus)})") from None
    return ProgramStatusChanged(program_from_proto(message.program), message.run_id, status, message.schedule_id,
                                message.job_id)


def _require(path: str, value: str) -> None:
    if not value.strip():
        raise InvalidArgument(path, "must not be empty")
