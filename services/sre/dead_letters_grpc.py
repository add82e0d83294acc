"""gRPC DeadLetters: `sluice dlq list` and `sluice dlq replay` online, served beside the registry.

The server follows the dead-letter topic under a group of its own that never commits (as the CLI
reads it), so after a restart it reads the topic from its start again and holds what the topic
retains; replays are recorded in the event log as the CLI records them, and refused a second time."""
from __future__ import annotations

import asyncio
import uuid
from bisect import insort

from sluice.bus.port import Bus, Producer, Record, UnknownTopic
from sluice.bus.topics import DEAD_LETTER
from sluice.domain.errors import FailedPrecondition, InvalidArgument, NotFound
from sluice.eventlog.port import EventLog
from sluice.paging import after_key, fill_page, next_page_token, paging
from sluice.runtime.grpc_server import GrpcBinding, grpc_errors
from sluice.v1 import dead_letters_pb2, dead_letters_pb2_grpc
from sluice_services.sre import dead_letters

LISTING = "DeadLetters.ListDeadLetters"
TOPIC_RETRY_SECONDS = 1.0


def _position(record: Record) -> tuple[int, int]:
    return (record.partition, record.offset)


class DeadLetterFollower:
    """The dead-letter topic's records in topic order, kept up to date by `follow` (a background task)."""

    def __init__(self, bus: Bus) -> None:
        self._bus = bus
        self.records: list[Record] = []

    async def follow(self) -> None:
        consumer = None
        while consumer is None:
            try:
                consumer = self._bus.consumer(f"sluice-dlq-online-{uuid.uuid4().hex[:12]}", [DEAD_LETTER])
            except UnknownTopic:  # the topics are made at start; a follower may be first
                await asyncio.sleep(TOPIC_RETRY_SECONDS)
        try:
            while True:
                for record in await consumer.poll(timeout=1.0):
                    insort(self.records, record, key=_position)
        finally:
            await consumer.close()


class DeadLettersServicer(dead_letters_pb2_grpc.DeadLettersServicer):
    def __init__(self, follower: DeadLetterFollower, log: EventLog, producer: Producer) -> None:
        self._follower, self._log, self._producer = follower, log, producer
        self._replaying = asyncio.Lock()

    @grpc_errors
    async def ListDeadLetters(self, request, context):
        size, after = paging(request, LISTING, _is_position)
        topic, reason = request.topic, request.reason.lower()
        replayed = self._log_replays()
        candidates = ((key, record) for key, record in after_key(self._follower.records, _position, after)
                      if (not topic or record.header("source-topic") == topic)
                      and reason in record.header("reason").lower())
        letters, last = fill_page(candidates, size, lambda record: _to_proto(record, replayed))
        return dead_letters_pb2.ListDeadLettersResponse(dead_letters=letters,
                                                        next_page_token=next_page_token(LISTING, last))

    @grpc_errors
    async def ReplayDeadLetter(self, request, context):
        if not request.id:
            raise InvalidArgument("id", "must not be empty")
        record = dead_letters.find(self._follower.records, request.id)
        if record is None:
            raise NotFound(f"no dead letter {request.id!r} (ids are PARTITION/OFFSET, as ListDeadLetters answers)")
        async with self._replaying:  # one check-publish-record at a time: no double replay from this server
            if request.id in self._log_replays() and not request.force:
                raise FailedPrecondition(f"dead letter {request.id} was replayed before (force replays it again)")
            await dead_letters.republish(self._producer, [record])
            dead_letters.record_replays(self._log, [record])
        return dead_letters_pb2.ReplayDeadLetterResponse(dead_letter=_to_proto(record, {request.id}))

    def _log_replays(self) -> set[str]:
        return dead_letters.replayed_ids(self._log)


def _is_position(key: tuple) -> bool:
    return len(key) == 2 and all(type(part) is int for part in key)


def _to_proto(record: Record, replayed: set[str]) -> dead_letters_pb2.DeadLetter:
    letter_id = dead_letters.letter_id(record)
    return dead_letters_pb2.DeadLetter(
        id=letter_id, source_topic=record.header("source-topic"),
        consumer_group=record.header("consumer-group"), reason=record.header("reason"),
        headers=dead_letters.headers_text(record), key=record.key or b"", value=record.value,
        replayed=letter_id in replayed)


def bindings(follower: DeadLetterFollower, log: EventLog, producer: Producer) -> list[GrpcBinding]:
    return [GrpcBinding(dead_letters_pb2.DESCRIPTOR.services_by_name["DeadLetters"].full_name,
                        dead_letters_pb2_grpc.add_DeadLettersServicer_to_server,
                        DeadLettersServicer(follower, log, producer))]
