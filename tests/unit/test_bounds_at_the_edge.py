"""Issue 23, hole 5: poison inputs are refused where they enter or dead-lettered with their reason;
no number accepted overflows date arithmetic later, no size accepted is too big for the bus."""
from __future__ import annotations

from datetime import datetime, timezone

from sluice.bus.port import Record
from sluice.runtime.consumer import BatchHandler, ConsumerLoop, Subscription
from sluice.v1 import notifications_pb2 as pb
from services.matcher.lookup import ScheduleLookup

T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)


class OnePollConsumer:
    def __init__(self, records: list[Record]) -> None:
        self._records = records
        self.commits: list = []

    async def poll(self, timeout: float = 1.0, max_records: int = 500) -> list[Record]:
        records, self._records = self._records, []
        return records

    async def commit(self, offsets=None) -> None:
        self.commits.append(offsets)

    def assignment(self) -> set:
        return set()

    async def close(self) -> None:
        pass


class DeadLetters:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes, dict]] = []

    async def send(self, topic, value, key=None, headers=()) -> None:
        self.sent.append((value, dict(headers)))

    async def close(self) -> None:
        pass


def _notification(notification_id: str, seconds: int) -> bytes:
    message = pb.Notification(id=notification_id, partition_committed=pb.PartitionCommitted(
        namespace="ns", dataset="clicks", partitions=[pb.PartitionRef(
            key=[pb.KeyValue(name="hour", value="1")], location="/data/1")]))
    message.time.seconds = seconds
    return message.SerializeToString()


async def test_a_far_future_timestamp_in_a_poll_of_many_is_dead_lettered_and_the_rest_handled():
    """Timestamp.seconds = 10**12 in a poll of two records: the matcher lookup's batch handler
    dead-letters that record with its reason, applies the other, and the poll is committed."""
    good = _notification("good", int(T0.timestamp()))
    bad = _notification("bad", 10**12)
    records = [Record("partition-notifications", 0, offset, b"k", value, (), 0)
               for offset, value in enumerate([bad, good])]
    applied = []

    async def apply(items):
        applied.extend(notification.id for _, notification in items)

    consumer, dead = OnePollConsumer(records), DeadLetters()
    loop = ConsumerLoop(consumer, Subscription("matcher-lookup", {
        "partition-notifications": BatchHandler(ScheduleLookup.parse, apply)}), dead)
    assert await loop.step(0) == 2
    assert applied == ["good"]
    assert [value for value, _ in dead.sent] == [bad]
    reason = dead.sent[0][1]["reason"].decode()
    assert reason.startswith("malformed:") and "notification.time" in reason
    assert consumer.commits  # the poll's offsets are committed


async def test_any_parse_error_of_one_record_in_a_batch_dead_letters_that_record():
    """Defence in depth: a parser's unexpected error (a bug) dead-letters its record, not the process."""
    def parse(record: Record) -> bytes:
        if record.value == b"boom":
            raise OverflowError("date value out of range")
        return record.value

    applied = []

    async def apply(items):
        applied.extend(value for _, value in items)

    records = [Record("t", 0, offset, b"k", value, (), 0) for offset, value in enumerate([b"boom", b"ok", b"ok2"])]
    consumer, dead = OnePollConsumer(records), DeadLetters()
    loop = ConsumerLoop(consumer, Subscription("g", {"t": BatchHandler(parse, apply)}), dead)
    assert await loop.step(0) == 3
    assert applied == [b"ok", b"ok2"]
    assert [value for value, _ in dead.sent] == [b"boom"]
    assert "date value out of range" in dead.sent[0][1]["reason"].decode()
