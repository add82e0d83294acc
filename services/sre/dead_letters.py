"""The dead-letter topic's records as operators see them: ids, headers, replays. Used offline by
`sluice dlq` (services/cli/sre.py) and online by the DeadLetters gRPC service (dead_letters_grpc.py)."""
from __future__ import annotations

import json
import uuid
from typing import Any, Callable, Sequence

from sluice.bus.port import Bus, Producer, Record
from sluice.bus.topics import ALL_TOPICS, DEAD_LETTER
from sluice.domain.errors import FailedPrecondition
from sluice.eventlog.port import ANY_VERSION, EventLog, NewEvent
from sluice.runtime.consumer import REPLAYED_FOR_HEADER

REPLAYS_STREAM = "dlq-replays"
"""Each replayed dead letter is recorded here, so a second replay is refused unless forced."""
ADDED_HEADERS = ("reason", "source-topic", "source-partition", "source-offset", "consumer-group")
"""What the dead-lettering consumer added; a replay publishes the message without them."""
REPLAYABLE_TOPICS = frozenset(spec.name for spec in ALL_TOPICS) - {DEAD_LETTER}
"""The topics Sluice's consumers read: the only ones a dead letter can have come from."""


def letter_id(record: Record) -> str:
    return f"{record.partition}/{record.offset}"


def headers_text(record: Record) -> dict[str, str]:
    return {name: value.decode("utf-8", errors="replace") for name, value in record.headers}


def letter_json(record: Record) -> dict[str, Any]:
    return {"id": letter_id(record), "headers": headers_text(record),
            "key": record.key.decode("utf-8", errors="replace") if record.key else None, "value_hex": record.value.hex()}


def find(records: Sequence[Record], wanted: str) -> Record | None:
    return next((record for record in records if letter_id(record) == wanted), None)


async def drain(bus: Bus, idle_seconds: float, on_read: Callable[[int], None] = lambda count: None) -> list[Record]:
    """Every record of the dead-letter topic, read under a throwaway group (nothing is committed),
    until none came for `idle_seconds`; `on_read` is told how many each poll brought (progress)."""
    consumer = bus.consumer(f"sluice-dlq-{uuid.uuid4().hex[:12]}", [DEAD_LETTER])
    records: list[Record] = []
    try:
        idle = 0.0
        while idle < idle_seconds:
            batch = await consumer.poll(timeout=0.5)
            records += batch
            on_read(len(batch))
            idle = 0.0 if batch else idle + 0.5
    finally:
        await consumer.close()
    return sorted(records, key=lambda r: (r.partition, r.offset))


def replayed_ids(log: EventLog) -> set[str]:
    return {json.loads(event.data)["id"] for event in log.read_stream(REPLAYS_STREAM)}


def check_replayable(records: Sequence[Record]) -> None:
    """FailedPrecondition naming the first record whose source-topic header names no topic Sluice consumes
    (none, the dead-letter topic, another): replaying it would publish where it never came from."""
    for record in records:
        if (topic := record.header("source-topic")) not in REPLAYABLE_TOPICS:
            raise FailedPrecondition(f"dead letter {letter_id(record)} names no topic Sluice consumes as its "
                                     f"source-topic ({topic!r}): not replayed")


async def republish(producer: Producer, records: Sequence[Record]) -> None:
    """Each record again to its source topic, without the headers dead-lettering added, and marked as a
    replay for the group that dead-lettered it (REPLAYED_FOR_HEADER): that group never handled it, though
    it may have recorded later positions of the same sender since (the matcher's outbox relay positions)."""
    check_replayable(records)
    for record in records:
        kept = [(name, value) for name, value in record.headers if name not in _REPLACED]
        if group := record.header("consumer-group"):
            kept.append((REPLAYED_FOR_HEADER, group.encode()))
        await producer.send(record.header("source-topic"), record.value, key=record.key, headers=kept)


_REPLACED = frozenset({*ADDED_HEADERS, REPLAYED_FOR_HEADER})


def record_replays(log: EventLog, records: Sequence[Record]) -> None:
    log.append(REPLAYS_STREAM, [NewEvent(str(uuid.uuid4()), "DeadLetterReplayed", json.dumps(
        {"id": letter_id(r), "topic": r.header("source-topic")}).encode()) for r in records], ANY_VERSION)
