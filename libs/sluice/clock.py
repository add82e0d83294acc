"""Time is injected: domain code receives `now`, services receive a Clock."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """Current time, timezone-aware (UTC)."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(timezone.utc)


class SimulatedClock:
    """A clock that only moves when told to; scheduling tests run on it in milliseconds."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=timezone.utc)

    def now(self) -> datetime:
        return self._now

    def advance(self, delta: timedelta) -> datetime:
        if delta < timedelta(0):
            raise ValueError("a clock does not go backwards")
        self._now += delta
        return self._now

    def set(self, when: datetime) -> datetime:
        return self.advance(when - self._now)


EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def epoch_micros(when: datetime) -> int:
    """Microseconds since the epoch of an aware datetime: an exact, JSON-safe sort key."""
    delta = when - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
