"""The Faust app: one agent reads object-store events from a Kafka topic and hands each message to the
Bridge, which publishes through Sluice's Notifications.Publish and dead-letters what it must.

At-least-once, not Faust's exactly_once (open duplicate bugs): an event is acked by hand after its
records were published or dead-lettered, and acked offsets are committed every `commit_interval`; a
crash, stop or rebalance before that redelivers it (the worker does not wait for an event stuck in
a retry: `stream_wait_empty=False`), and the notification id derived from
(bucket, key, sequencer) makes Sluice ignore the second copy. No tables: `memory://` store, no web
server. The source and dead-letter topics must exist (Faust creates only its own assignor topic).
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, Sequence

import faust

from sluice.bus.kafka_security import KafkaSecurity, parse_kafka_url
from sluice.bus.topics import DEAD_LETTER
from sluice.client import SluiceClient
from sluice.domain.common import Notification
from sluice.wire.common import notification_to_proto
from sluice_services.ingest.bridge import Backoff, Bridge, Headers, Source
from sluice_services.ingest.mapping import Route

log = logging.getLogger("sluice.ingest")

DEFAULT_APP_ID = "sluice-ingest"
DEFAULT_TOPIC = "sluice.object-events"


@dataclass(frozen=True)
class IngestSettings:
    broker: str
    """kafka://HOST:PORT[,...][?security options], as the bus URL (sluice.bus.kafka_security)."""
    routes: Sequence[Route]
    topic: str = DEFAULT_TOPIC
    dead_letter_topic: str = DEAD_LETTER
    app_id: str = DEFAULT_APP_ID
    """Faust's app id: the Kafka consumer group."""
    datadir: str = ""
    commit_interval: float = 1.0
    backoff: Backoff = field(default_factory=Backoff)


def grpc_publisher(client: SluiceClient):
    """Notifications.Publish on a worker thread (the client is synchronous; its channel is thread-safe)."""

    async def publish(notification: Notification) -> None:
        await asyncio.to_thread(client.publish, notification_to_proto(notification))
    return publish


def broker_options(url: str) -> dict[str, Any]:
    """faust.App's broker and broker_credentials for a bus URL."""
    parsed = parse_kafka_url(url)
    return {"broker": [f"kafka://{server}" for server in parsed.bootstrap.split(",")],
            "broker_credentials": _credentials(parsed.security)}


def _credentials(security: KafkaSecurity) -> faust.auth.Credentials | None:
    if security.uses_sasl:
        return faust.SASLCredentials(username=security.username, password=security.password,
                                     mechanism=security.mechanism, ssl_context=security.ssl_context)
    if security.ssl_context is not None:
        return faust.SSLCredentials(security.ssl_context)
    return None


def build_app(settings: IngestSettings, publish) -> tuple[faust.App, Bridge]:
    """The app, and its Bridge (whose `counts` tell what it did)."""
    app = faust.App(
        settings.app_id, **broker_options(settings.broker),
        store="memory://", web_enabled=False, autodiscover=False,
        **({"datadir": settings.datadir} if settings.datadir else {}),
        processing_guarantee="at_least_once", consumer_auto_offset_reset="earliest",
        broker_commit_interval=settings.commit_interval, producer_acks=-1,
        stream_wait_empty=False,  # stop or rebalance now; the unacked event in a retry is redelivered
        key_serializer="raw", value_serializer="raw",
    )
    source = app.topic(settings.topic, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")
    dead_letters = app.topic(settings.dead_letter_topic, key_serializer="raw", value_serializer="raw")
    backoff = settings.backoff

    async def dead_letter(value: bytes, key: bytes | None, headers: Headers) -> None:
        """Sent now (force: not attached to the event's commit) and awaited until the broker has it;
        retried while the broker does not answer, so the source offset never passes an unsent letter."""
        delays = iter(backoff.delays())
        while True:
            try:
                sent = await dead_letters.send(key=key, value=value, headers=headers, force=True)
                await sent
                return
            except asyncio.CancelledError:
                raise
            except Exception as error:  # the broker: retry
                delay = next(delays)
                log.warning("sending to %s failed (%r); retry in %.1f s", settings.dead_letter_topic, error, delay)
                await asyncio.sleep(delay)

    bridge = Bridge(settings.routes, publish, dead_letter, backoff=backoff)

    @app.agent(source, name="ingest", concurrency=1)
    async def ingest(stream):
        # Manual acks: Faust's automatic ack runs in a `finally`, so an event whose handling is cancelled
        # (shutdown, rebalance during a retry) would be acked and committed unhandled -- at most once.
        manual = stream.noack()
        async for event in manual.events():
            message = event.message
            where = Source(message.topic, message.partition, message.offset, settings.app_id)
            try:
                await bridge.handle(event.value, event.key, where)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # a bug, not the message's fault: park it rather than lose or loop on it
                log.exception("handling %s@%s/%s failed", message.topic, message.partition, message.offset)
                await dead_letter(event.value or b"", event.key, [
                    ("reason", f"handler failed: {error!r}".encode()), ("source-topic", message.topic.encode()),
                    ("source-partition", str(message.partition).encode()),
                    ("source-offset", str(message.offset).encode()), ("consumer-group", settings.app_id.encode())])
            await manual.ack(event)

    return app, bridge
