"""One Kafka message in: its records published to Sluice, refused ones dead-lettered. No Faust here.

Deterministic failures go to the dead-letter topic with the reason (a record that does not parse or
match, a refusal by the server such as INVALID_ARGUMENT or PERMISSION_DENIED); infrastructure ones
(UNAVAILABLE, DEADLINE_EXCEEDED, an UNAUTHENTICATED token, anything else) are retried with capped
exponential backoff until they pass, holding the partition's offset where it is: valid work is never
parked. `handle` never raises for a message's content.
"""
from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass
from typing import Awaitable, Callable, Iterable, Protocol, Sequence

import grpc

from sluice.domain.common import Notification
from sluice_services.ingest.mapping import Announce, Ignore, Refuse, Route, parse_message

log = logging.getLogger("sluice.ingest")

REFUSALS = frozenset({
    grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.NOT_FOUND,
})
"""Codes that say this notification will never be accepted: dead-lettered. Every other code is retried."""

Headers = list[tuple[str, bytes]]


class Publisher(Protocol):
    async def __call__(self, notification: Notification) -> None:
        """Publish; raises grpc.RpcError (with .code() and .details()) when the server does not accept it."""


class DeadLetters(Protocol):
    async def __call__(self, value: bytes, key: bytes | None, headers: Headers) -> None:
        """Deliver to the dead-letter topic (awaited until the broker acknowledged it)."""


@dataclass(frozen=True, slots=True)
class Backoff:
    first: float = 0.2
    factor: float = 2.0
    cap: float = 30.0

    def delays(self) -> Iterable[float]:
        delay = self.first
        while True:
            yield delay
            delay = min(delay * self.factor, self.cap)


@dataclass(frozen=True, slots=True)
class Source:
    """Where a message came from, for the dead letter's headers."""

    topic: str
    partition: int
    offset: int
    group: str


class Bridge:
    def __init__(self, routes: Sequence[Route], publish: Publisher, dead_letter: DeadLetters, *,
                 backoff: Backoff = Backoff(), sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self._routes = tuple(routes)
        self._publish = publish
        self._dead_letter = dead_letter
        self._backoff = backoff
        self._sleep = sleep
        self.counts: Counter[str] = Counter()
        """published, dead_lettered, ignored, retries."""

    async def handle(self, value: bytes | None, key: bytes | None, source: Source) -> None:
        for outcome in parse_message(value, self._routes):
            if isinstance(outcome, Ignore):
                self.counts["ignored"] += 1
                log.debug("%s@%s/%s: ignored: %s", source.topic, source.partition, source.offset, outcome.reason)
            elif isinstance(outcome, Refuse):
                await self._send_dead_letter(value or b"", key, source, outcome.reason, outcome.record)
            else:
                await self._announce(outcome, value or b"", key, source)

    async def _announce(self, announce: Announce, value: bytes, key: bytes | None, source: Source) -> None:
        delays = iter(self._backoff.delays())
        attempt = 0
        while True:
            attempt += 1
            try:
                await self._publish(announce.notification)
            except grpc.RpcError as error:
                code, details = _code(error), _details(error)
                if code in REFUSALS:
                    await self._send_dead_letter(value, key, source, f"refused: {code.name}: {details}",
                                                 announce.record)
                    return
                delay = next(delays)
                self.counts["retries"] += 1
                log.warning("publishing %s (%s) failed with %s: %s; retry %d in %.1f s", announce.notification.id,
                            announce.source, code.name if code else "?", details, attempt, delay)
                await self._sleep(delay)
                continue
            self.counts["published"] += 1
            log.info("%s -> %s.%s %s (notification %s)", announce.source,
                     announce.notification.payload.namespace, announce.notification.payload.dataset,
                     announce.notification.payload.partitions[0].location, announce.notification.id)
            return

    async def _send_dead_letter(self, value: bytes, key: bytes | None, source: Source, reason: str,
                                record: int | None) -> None:
        self.counts["dead_lettered"] += 1
        log.warning("%s@%s/%s to the dead-letter topic: %s", source.topic, source.partition, source.offset, reason)
        headers: Headers = [
            ("reason", reason.encode()),
            ("source-topic", source.topic.encode()),
            ("source-partition", str(source.partition).encode()),
            ("source-offset", str(source.offset).encode()),
            ("consumer-group", source.group.encode()),
        ]
        if record is not None:
            headers.append(("record", str(record).encode()))
        await self._dead_letter(value, key, headers)


def _code(error: grpc.RpcError) -> grpc.StatusCode | None:
    code = getattr(error, "code", None)
    return code() if callable(code) else None


def _details(error: grpc.RpcError) -> str:
    details = getattr(error, "details", None)
    return (details() if callable(details) else str(error)) or ""
