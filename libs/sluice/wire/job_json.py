"""An event's job as protobuf straight from the event's JSON: the outbox routes' encoding.

A route reads back an event the service appended (the matcher's JobTriggered, the checker's
JobsAdmitted) and sends its jobs on the bus. Decoding the JSON into a Job and encoding that field by
field builds every dataclass of the job only to read it once; this builds the message from the
JSON's values. The JSON is the event codec's (sluice.eventlog.codec: dataclass fields by name,
enums by value, datetimes in ISO format, tuples as lists), and the message is job_to_proto's
(tests/unit/test_wire_job_json.py compares them). A job of another shape (written before one of
its fields was added) is not converted here: the route decodes its event instead.
"""
from __future__ import annotations

import dataclasses
from datetime import datetime
from functools import cache, lru_cache
from typing import Any, TypeVar

import orjson
from google.protobuf.message import Message

from sluice.domain.common import Notification, PartitionCommitted, PartitionRef, ProgramRef, ProgramStatusChanged
from sluice.domain.constraints.specs import Constraint, TimeoutPolicy
from sluice.domain.jobs import Job, RetryPolicy, TriggerContext, WaitingJobPolicy
from sluice.eventlog.codec import EventTypes, from_jsonable
from sluice.eventlog.port import RecordedEvent
from sluice.v1 import jobs_pb2 as pb
from sluice.v1 import notifications_pb2
from sluice.wire.common import timestamp_to_proto
from sluice.wire.jobs import job_to_proto
from sluice.wire.schedules import (
    constraint_to_proto,
    retry_policy_to_proto,
    timeout_policy_to_proto,
    waiting_job_policy_to_proto,
)


def _names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


M = TypeVar("M", bound=Message)
_JOB, _CONTEXT, _PROGRAM, _RETRY = _names(Job), _names(TriggerContext), _names(ProgramRef), _names(RetryPolicy)
_NOTIFICATION, _PARTITION = _names(Notification), _names(PartitionRef)
_COMMITTED, _STATUS_CHANGED = _names(PartitionCommitted), _names(ProgramStatusChanged)


def job_message(recorded: RecordedEvent, types: EventTypes, message_type: type[M]) -> M:
    """message_type(job=job_to_proto(event.job)) of a recorded event that holds a job (JobTriggered,
    JobAdmitted): built from the event's JSON, else from the decoded event."""
    fields = event_job_fields(recorded.data)
    if fields is not None:
        try:
            return message_type(job=fields)
        except (TypeError, ValueError):  # a value of another type: decoding raises what it raises
            pass
    return message_type(job=job_to_proto(types.decode(recorded).job))


def jobs_messages(recorded: RecordedEvent, types: EventTypes, message_type: type[M]) -> list[M]:
    """job_message of each job of a recorded event that holds several (JobsAdmitted's `jobs`)."""
    try:
        event = orjson.loads(recorded.data)
        values = event.get("jobs") if type(event) is dict else None
        fields = [job_fields(value) for value in values] if type(values) is list else [None]
    except (orjson.JSONDecodeError, TypeError, ValueError):  # the decoding path raises what it raises
        fields = [None]
    if None not in fields:
        try:
            return [message_type(job=job) for job in fields]
        except (TypeError, ValueError):
            pass
    return [message_type(job=job_to_proto(job)) for job in types.decode(recorded).jobs]


def event_job_fields(data: bytes) -> dict[str, Any] | None:
    """The fields of job_to_proto(event.job), as the message constructors take them (nested dicts),
    of the event whose JSON is `data`; None when its job is not of the current shape, or the JSON not
    what orjson reads alike (decode the event then)."""
    try:
        event = orjson.loads(data)
        return job_fields(event.get("job")) if type(event) is dict else None
    except (orjson.JSONDecodeError, TypeError, ValueError):  # the decoding path raises what it raises
        return None


def job_fields(value: Any) -> dict[str, Any] | None:
    """The fields of job_to_proto(job) of the job whose codec JSON is `value`, or None (see the
    module). Empty maps and lists are left out, as unset (the encoding is the same). Values are
    not checked here: the message's constructor raises TypeError or ValueError on a wrong type."""
    if not _shaped(value, _JOB):
        return None
    context, program, retry = value["context"], value["program"], value["retry_policy"]
    if not (_shaped(context, _CONTEXT) and _shaped(program, _PROGRAM) and _shaped(retry, _RETRY)):
        return None
    trigger = {"schedule_id": context["schedule_id"], "schedule_name": context["schedule_name"],
               "logical_time": _timestamp(context["logical_time"])}
    if context["properties"]:
        trigger["properties"] = context["properties"]
    if context["notifications"]:
        notifications = [_notification_fields(n) for n in context["notifications"]]
        if None in notifications:
            return None
        trigger["notifications"] = notifications
    fields = {
        "id": value["id"],
        "schedule_id": value["schedule_id"],
        "schedule_generation": value["schedule_generation"],
        "program": program,
        "context": trigger,
        "created_at": _timestamp(value["created_at"]),
        "priority": value["priority"],
        "timeout": {"seconds": value["timeout_seconds"]},
        "timeout_policy": _timeout_policy(value["timeout_policy"]),
        "sequence": value["sequence"],
        "triggered_at": _timestamp(value["triggered_at"]),
        "retry_policy": _retry_policy(retry["max_retries"], retry["delay_seconds"], retry["backoff"],
                                      retry["retry_failed"]),
        "waiting_job_policy": _waiting_job_policy(value["waiting_job_policy"]),
        "max_run_seconds": value["max_run_seconds"],
    }
    if value["constraints"]:
        fields["constraints"] = [constraint_to_proto(c) for c in _constraints(value["constraints"])]
    if value["spark_conf"]:
        fields["spark_conf"] = value["spark_conf"]
    return fields


def _shaped(value: Any, names: frozenset[str]) -> bool:
    return type(value) is dict and value.keys() == names


def _notification_fields(value: Any) -> dict[str, Any] | None:
    """notification_to_proto's fields of the notification whose codec JSON is `value`, or None when
    it is not of the current shape (its payload is told apart by its fields, as the codec does)."""
    if not _shaped(value, _NOTIFICATION) or type(payload := value["payload"]) is not dict:
        return None
    if payload.keys() == _COMMITTED:
        partitions = []
        for partition in payload["partitions"]:
            if not _shaped(partition, _PARTITION) or type(partition["key"]) is not dict:
                return None
            fields = {"key": [{"name": name, "value": key} for name, key in partition["key"].items()],
                      "location": partition["location"], "size_bytes": partition["size_bytes"],
                      "record_count": partition["record_count"]}
            if partition["metadata"]:
                fields["metadata"] = partition["metadata"]
            partitions.append(fields)
        return {"id": value["id"], "time": _timestamp(value["time"]), "partition_committed": {
            "namespace": payload["namespace"], "dataset": payload["dataset"], "partitions": partitions}}
    if payload.keys() == _STATUS_CHANGED and _shaped(payload["program"], _PROGRAM):
        return {"id": value["id"], "time": _timestamp(value["time"]), "program_status_changed": {
            "program": payload["program"], "run_id": payload["run_id"], "status": _run_status(payload["status"]),
            "schedule_id": payload["schedule_id"], "job_id": payload["job_id"]}}
    return None


def _constraints(values: list) -> tuple[Constraint, ...]:
    return from_jsonable(tuple[Constraint, ...], values) if values else ()


_TIMESTAMPS: dict[str, dict[str, int]] = {}
"""ISO time -> its Timestamp's fields: a burst of fires shares a few times (the minute, the creation)."""
_TIMESTAMPS_KEPT = 1024


def _timestamp(text: str | None) -> dict[str, int] | None:
    if text is None:
        return None
    fields = _TIMESTAMPS.get(text)
    if fields is None:
        stamp = timestamp_to_proto(datetime.fromisoformat(text))
        if len(_TIMESTAMPS) >= _TIMESTAMPS_KEPT:
            _TIMESTAMPS.clear()
        fields = _TIMESTAMPS[text] = {"seconds": stamp.seconds, "nanos": stamp.nanos}
    return fields


@cache  # only the statuses RunStatus knows are kept: another raises
def _run_status(value: str) -> int:
    return notifications_pb2.RunStatus.Value(value)


@cache
def _timeout_policy(value: str) -> int:
    return timeout_policy_to_proto(TimeoutPolicy(value))


@cache
def _waiting_job_policy(value: str) -> int:
    return waiting_job_policy_to_proto(WaitingJobPolicy(value))


@lru_cache(maxsize=256)  # schedules' settings: few, but not bounded by the code
def _retry_policy(max_retries: int, delay_seconds: int, backoff: float, retry_failed: bool) -> pb.RetryPolicy:
    return retry_policy_to_proto(RetryPolicy(max_retries, delay_seconds, backoff, retry_failed))
