"""The consumer loop: one handler per topic; malformed messages go to the dead-letter topic."""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Awaitable, Callable, Mapping

from sluice.bus.port import Bus, Producer, Record
from sluice.bus.topics import DEAD_LETTER
from sluice.runtime.errors import InvalidArgument, MalformedMessage

log = logging.getLogger(__name__)

Handler = Callable[[Record], Awaitable[None]]

MAX_ATTEMPTS = 5


@dataclass(frozen=True)
class Subscription:
    group: str
    handlers: Mapping[str, Handler]  # topic -> handler


async def consume(bus: Bus, subscription: Subscription, dead_letter: Producer, poll_timeout: float = 0.2) -> None:
    consumer = bus.consumer(subscription.group, list(subscription.handlers))
    try:
        while True:
            records = await consumer.poll(timeout=poll_timeout)
            for record in records:
                await _handle(record, subscription.handlers[record.topic], dead_letter, subscription.group)
            if records:
                await consumer.commit()
    finally:
        await consumer.close()


async def _handle(record: Record, handler: Handler, dead_letter: Producer, group: str) -> None:
    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            await handler(record)
            return
        except (MalformedMessage, InvalidArgument) as error:
            await send_to_dead_letter(dead_letter, record, group, f"malformed: {error}")
            return
        except asyncio.CancelledError:
            raise
        except Exception as error:  # a bug or an outage: retry, then park the message rather than crash-loop
            log.exception("%s: handling %s@%s/%s failed (attempt %s)", group, record.topic, record.partition,
                          record.offset, attempt)
            if attempt == MAX_ATTEMPTS:
                await send_to_dead_letter(dead_letter, record, group, f"handler failed: {error!r}")
                return
            await asyncio.sleep(0.05 * 2**attempt)


async def send_to_dead_letter(producer: Producer, record: Record, group: str, reason: str) -> None:
    log.warning("%s: %s@%s/%s to the dead-letter topic: %s", group, record.topic, record.partition, record.offset,
                reason)
    headers = [
        ("reason", reason.encode()),
        ("source-topic", record.topic.encode()),
        ("source-partition", str(record.partition).encode()),
        ("source-offset", str(record.offset).encode()),
        ("consumer-group", group.encode()),
        *record.headers,
    ]
    await producer.send(DEAD_LETTER, record.value, key=record.key, headers=headers)
