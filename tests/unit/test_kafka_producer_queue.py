"""KafkaProducer._queue: a record aiokafka could not queue in time (KafkaTimeoutError: the partition's
batches stayed full) is queued again, not failed; nothing else of the producer is involved."""
from __future__ import annotations

import asyncio
import logging

from aiokafka.errors import KafkaTimeoutError

from sluice.bus.kafka import KafkaBus
from sluice.bus.port import Message


class _FullFor:
    """aiokafka's producer.send as seen when the batches stay full for the first `refusals` tries."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.queued: list[tuple[str, bytes, bytes | None, int]] = []

    async def send(self, topic, value, key=None, partition=None, headers=None):
        if self.refusals:
            self.refusals -= 1
            raise KafkaTimeoutError()
        self.queued.append((topic, value, key, partition))
        return asyncio.get_running_loop().create_future()


async def test_a_record_refused_for_full_batches_is_queued_again_with_a_warning(caplog) -> None:
    bus = KafkaBus("127.0.0.1:9", unacknowledged_warning_after=0.0)
    producer, aiokafka_producer = bus.producer(), _FullFor(refusals=2)

    with caplog.at_level(logging.WARNING, logger="sluice.bus.kafka"):
        delivered = await producer._queue(aiokafka_producer, "sluice.jobs", 3, Message("sluice.jobs", b"v", b"k"))

    assert not delivered.done()
    assert aiokafka_producer.queued == [("sluice.jobs", b"v", b"k", 3)]
    assert sum("waited" in record.getMessage() and "sluice.jobs[3]" in record.getMessage()
               for record in caplog.records) == 2
