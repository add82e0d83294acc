"""The outbox relay: committed events of the log are published to the bus, never uncommitted ones.

Publishing is at-least-once (a crash between send and checkpoint republishes); every message
carries the event id in the `sluice-event-id` header and the relay's name and the event's log
position in `sluice-outbox` / `sluice-outbox-position` (a relay publishes in position order, so per
relay and bus partition the positions increase), and consumers recognise what they had (a schedule
generation, a job sequence, a run id, a lineage event; the matcher a notification by its relay and
position, `sluice_services.matcher.resends`). The messages of one read of the log go out in one send;
the position is saved after it at most every CHECKPOINT_SECONDS, so a crash republishes up to that
much. Notifications are saved after every send, which keeps what a crash resends small. An
infrastructure failure of the send (the bus down) is waited out and the same messages sent again
(`Pauses`: capped backoff, the service not ready meanwhile); the relay does not crash. A read that publishes nothing
(another service's events) saves the position only every CHECKPOINT_EVERY events: re-reading those
after a restart publishes nothing. A stopping relay saves what it has not."""
from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from typing import Awaitable, Callable, NamedTuple, Sequence

from sluice.bus.port import Message, Producer
from sluice.bus.topics import DEAD_LETTER, PARTITION_NOTIFICATIONS, PROGRAM_NOTIFICATIONS
from sluice.domain.bounds import MAX_BUS_MESSAGE_BYTES
from sluice.eventlog.port import Checkpoint, EventLog, RecordedEvent
from sluice.runtime.consumer import BACKOFF, Pauses
from sluice.runtime.errors import Backoff, is_infrastructure
from sluice.runtime.health import Health
from sluice.runtime.metrics import Registry

log = logging.getLogger(__name__)

EVENT_ID_HEADER = "sluice-event-id"
RELAY_HEADER = "sluice-outbox"
"""The relay's name (the outbox checkpoint's), on every message it publishes."""
POSITION_HEADER = "sluice-outbox-position"
"""The event's log position (decimal), on every message: increasing per relay and bus partition."""
CHECKPOINT_EVERY = 256
CHECKPOINT_SECONDS = 1.0
SAVED_AT_ONCE = frozenset({PARTITION_NOTIFICATIONS, PROGRAM_NOTIFICATIONS})
"""Topics whose sends are followed by a checkpoint at once (see the module docstring)."""


class Outgoing(NamedTuple):
    """A message a route makes of an event. A tuple: a route makes one per message (a burst's thousands)."""

    topic: str
    key: str
    value: bytes


Route = Callable[[RecordedEvent], Sequence[Outgoing]]


class OutboxRelay:
    """Relays the events `route` turns into messages. With `prefixes` (the streams `route` publishes
    from) it reads only those streams' events; the others would publish nothing anyway."""

    def __init__(self, name: str, log: EventLog, producer: Producer, route: Route,
                 metrics: Registry | None = None, prefixes: Sequence[str] = (), *,
                 monotonic: Callable[[], float] = time.monotonic, health: Health | None = None,
                 backoff: Backoff = BACKOFF, sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> None:
        self._name = name
        self._pauses = Pauses(f"outbox relay {name}'s bus or log", health, backoff, sleep)
        self._prefixes = tuple(prefixes)
        self._checkpoint = f"outbox:{name}"
        self._log = log
        self._producer = producer
        self._route = route
        registry = metrics or Registry()
        self._published = registry.counter(
            "sluice_outbox_published_total", "Messages the outbox relay published to the bus.", ("relay", "topic"))
        self._position = registry.gauge(
            "sluice_outbox_position", "Log position of the last event the outbox relay has read.", ("relay",))
        self._lag = registry.gauge(
            "sluice_outbox_lag_seconds", "Age of the last event the outbox relay published, when it did.", ("relay",))
        self._lag.labels(name)
        self._monotonic = monotonic
        self._after: int | None = None
        self._saved: int | None = None
        self._saved_at = -float("inf")
        self._unsaved = 0

    async def run(self) -> None:
        try:
            async for events in self._log.subscribe_batches(self._start(), self._prefixes):
                await self._relay(events)
        finally:
            self._save_on_stop()

    async def publish_pending(self, limit: int = 1000) -> int:
        """Relay what has committed since the last call (at most `limit` events), without waiting:
        the crash harness (tests/crash) and the scenario tests' pump (tests/support/pump.py) step
        relays this way; how many events were read."""
        if self._after is None:
            self._start()
        events = self._log.read_all(self._after, limit, self._prefixes)
        if events:
            await self._relay(events)
        return len(events)

    def _start(self) -> int:
        self._after = self._saved = self._log.read_checkpoint(self._checkpoint) or 0
        self._unsaved = 0
        self._position.labels(self._name).set(self._after)
        return self._after

    async def _relay(self, events: list[RecordedEvent]) -> None:
        """One read of the log: its messages in one send, then its position saved when due."""
        relay = self._name.encode()
        messages = [_fitting(Message(outgoing.topic, outgoing.value, outgoing.key.encode(),
                                     [(EVENT_ID_HEADER, event.id.encode()), (RELAY_HEADER, relay),
                                      (POSITION_HEADER, str(event.position).encode())]), event)
                    for event in events for outgoing in self._route(event)]
        if messages:
            await self._pauses.retrying("publishing", lambda: self._producer.send_batch(messages))
            for topic, count in Counter(message.topic for message in messages).items():
                self._published.labels(self._name, topic).inc(count)
        position = events[-1].position
        self._position.labels(self._name).set(position)
        self._lag.labels(self._name).set(max(0.0, time.time() - events[-1].recorded_at.timestamp()))
        self._after = position
        self._unsaved += len(events)
        if (any(message.topic in SAVED_AT_ONCE for message in messages)
                or (messages and self._monotonic() - self._saved_at >= CHECKPOINT_SECONDS)
                or self._unsaved >= CHECKPOINT_EVERY):
            self._save(position)

    def _save(self, position: int) -> None:
        try:
            self._log.save_checkpoint(Checkpoint(self._checkpoint, position))
        except Exception as error:
            if not is_infrastructure(error):
                raise
            # saved with a later read: a restart meanwhile republishes more, which consumers recognise
            log.warning("outbox relay %s: position %s not saved yet: %s", self._name, position, error)
            return
        self._saved, self._saved_at, self._unsaved = position, self._monotonic(), 0

    def _save_on_stop(self) -> None:
        if self._after is None or self._after == self._saved:
            return
        try:
            self._save(self._after)
        except Exception as error:  # the log closing under it: what was not saved is published again
            log.warning("outbox relay %s: position %s not saved at stop: %r", self._name, self._after, error)


def _fitting(message: Message, event: RecordedEvent) -> Message:
    """The message, or, when it is too big for the bus (no consumer would read it; a broker may refuse
    it and the relay would crash-loop), a dead letter naming it: the event stays in the log, where
    `sluice` tools find it by its id. Requests are bounded where they enter (sluice.domain.bounds);
    this is the defence in depth."""
    if len(message.value) <= MAX_BUS_MESSAGE_BYTES:
        return message
    reason = (f"oversized: {len(message.value)} bytes > {MAX_BUS_MESSAGE_BYTES} for {message.topic}; "
              f"event {event.id} of stream {event.stream} at position {event.position} kept in the log")
    log.error("outbox: %s", reason)
    return Message(DEAD_LETTER, b"", message.key, [
        ("reason", reason.encode()), ("source-topic", message.topic.encode()),
        ("source-stream", event.stream.encode()), ("source-position", str(event.position).encode()),
        *message.headers])
