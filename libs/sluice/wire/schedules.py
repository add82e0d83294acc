from __future__ import annotations

from google.protobuf import duration_pb2, unknown_fields

from sluice.domain.schedules import PartitionTrigger, Schedule, validate
from sluice.runtime.errors import InvalidArgument
from sluice.v1 import schedules_pb2 as pb
from sluice.wire.common import program_from_proto, program_to_proto


def schedule_to_proto(schedule: Schedule) -> pb.Schedule:
    return pb.Schedule(
        id=schedule.id,
        name=schedule.name,
        program=program_to_proto(schedule.program),
        properties=dict(schedule.properties),
        trigger=trigger_to_proto(schedule.trigger),
        timeout=duration_pb2.Duration(seconds=schedule.timeout_seconds),
        priority=schedule.priority,
        enabled=schedule.enabled,
        generation=schedule.generation,
        description=schedule.description,
    )


def schedule_from_proto(message: pb.Schedule, schedule_id: str) -> Schedule:
    """Convert a client's schedule; the result is validated and InvalidArgument names the field."""
    schedule = Schedule(
        id=schedule_id,
        name=message.name,
        program=program_from_proto(message.program),
        trigger=trigger_from_proto(message.trigger, "schedule.trigger"),
        properties=dict(message.properties),
        timeout_seconds=message.timeout.seconds,
        priority=message.priority,
        enabled=message.enabled,
        generation=message.generation,
        description=message.description,
    )
    validate(schedule)
    return schedule


def trigger_to_proto(trigger: PartitionTrigger) -> pb.Trigger:
    return pb.Trigger(partition=pb.PartitionTrigger(namespace=trigger.namespace, dataset=trigger.dataset,
                                                    count=trigger.count))


def trigger_from_proto(message: pb.Trigger, path: str) -> PartitionTrigger:
    kind = message.WhichOneof("kind")
    if kind == "partition":
        p = message.partition
        return PartitionTrigger(p.namespace, p.dataset, p.count)
    if len(unknown_fields.UnknownFieldSet(message)):
        raise InvalidArgument(path, "unknown trigger type (supported: partition)")
    raise InvalidArgument(path, "a trigger is required (supported: partition)")
