"""Ids are injected like time, so a replayed log produces the same ids."""
from __future__ import annotations

import uuid
from typing import Protocol


class IdGenerator(Protocol):
    def new_id(self) -> str: ...


class RandomIds:
    def new_id(self) -> str:
        return str(uuid.uuid4())


class SequentialIds:
    """Deterministic ids for tests: prefix-000001, prefix-000002, ..."""

    def __init__(self, prefix: str = "id") -> None:
        self._prefix = prefix
        self._next = 0

    def new_id(self) -> str:
        self._next += 1
        return f"{self._prefix}-{self._next:06d}"


def derived_id(*parts: str) -> str:
    """A stable id derived from other ids: the same inputs always give the same id (idempotent retries)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "sluice:" + "/".join(parts)))
