"""A toy aggregate for the aggregate store's tests: a stream's state is the tuple of the values added to it."""
from __future__ import annotations

from dataclasses import dataclass

from sluice.eventlog.codec import EventTypes


@dataclass(frozen=True)
class Added:
    value: int


TYPES = EventTypes([Added])


def evolve(state: tuple, event: Added) -> tuple:
    return (*state, event.value)
