"""The outbox relay: committed events of the log are published to the bus, never uncommitted ones.

Publishing is at-least-once (a crash between send and checkpoint republishes); every message
carries the event id in the `sluice-event-id` header so consumers drop duplicates. The position is
saved after every publish, and only every CHECKPOINT_EVERY events that publish nothing (another
service's events): re-reading those after a restart publishes nothing."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Sequence

from sluice.bus.port import Producer
from sluice.eventlog.port import Checkpoint, EventLog, RecordedEvent
from sluice.runtime.metrics import Registry

log = logging.getLogger(__name__)

EVENT_ID_HEADER = "sluice-event-id"
CHECKPOINT_EVERY = 256


@dataclass(frozen=True)
class Outgoing:
    topic: str
    key: str
    value: bytes


Route = Callable[[RecordedEvent], Sequence[Outgoing]]


class OutboxRelay:
    def __init__(self, name: str, log: EventLog, producer: Producer, route: Route,
                 metrics: Registry | None = None) -> None:
        self._name = name
        self._checkpoint = f"outbox:{name}"
        self._log = log
        self._producer = producer
        self._route = route
        registry = metrics or Registry()
        self._published = registry.counter(
            "sluice_outbox_published_total", "Messages the outbox relay published to the bus.", ("relay", "topic"))
        self._position = registry.gauge(
            "sluice_outbox_position", "Log position of the last event the outbox relay has read.", ("relay",))

    async def run(self) -> None:
        after = self._log.read_checkpoint(self._checkpoint) or 0
        position = self._position.labels(self._name)
        position.set(after)
        unsaved = 0
        async for event in self._log.subscribe(after):
            messages = self._route(event)
            for message in messages:
                await self._producer.send(
                    message.topic, message.value, key=message.key.encode(),
                    headers=[(EVENT_ID_HEADER, event.id.encode())],
                )
                self._published.labels(self._name, message.topic).inc()
            position.set(event.position)
            unsaved += 1
            if messages or unsaved >= CHECKPOINT_EVERY:
                self._log.save_checkpoint(Checkpoint(self._checkpoint, event.position))
                unsaved = 0
