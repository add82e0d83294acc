"""Webhook delivery's port and its aiohttp adapter: one POST, its outcome in words (never the URL,
which may hold a secret)."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol

import aiohttp

from sluice.domain.alerts.policy import redacted

POST_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class SendOutcome:
    delivered: bool
    """The receiver answered 2xx."""
    outcome: str


class WebhookSender(Protocol):
    async def post(self, url: str, body: str, delivery_id: str) -> SendOutcome: ...

    async def close(self) -> None: ...


class AiohttpSender:
    """POSTs JSON with the delivery id as `Idempotency-Key`, within a timeout, following no redirect."""

    def __init__(self, timeout_seconds: float = POST_TIMEOUT_SECONDS) -> None:
        self._timeout = aiohttp.ClientTimeout(total=timeout_seconds)
        self._session: aiohttp.ClientSession | None = None

    async def post(self, url: str, body: str, delivery_id: str) -> SendOutcome:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        headers = {"Content-Type": "application/json", "Idempotency-Key": delivery_id,
                   "User-Agent": "sluice-alerts"}
        try:
            # the status is the outcome: the answer's body is never read (a receiver may send one without end)
            async with self._session.post(url, data=body.encode(), headers=headers, allow_redirects=False) as response:
                return SendOutcome(200 <= response.status < 300, f"HTTP {response.status}")
        except asyncio.TimeoutError:
            return SendOutcome(False, f"no answer from {redacted(url)} within {self._timeout.total:g} s")
        except Exception as error:  # noqa: BLE001 (whatever fails, the attempt failed: the delivery is retried)
            return SendOutcome(False, f"{type(error).__name__} posting to {redacted(url)}")

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
