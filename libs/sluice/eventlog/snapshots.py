"""The snapshot port: a service's (or a projection's) state at a position of the log, kept in the
event store itself so that it survives failover with the log it summarises.

A snapshot is an optimisation, never the truth: whoever loads one checks its schema (name and
version) and its bytes (sluice.runtime.snapshots) and folds the whole log when either is wrong. Adapters store the bytes
as they are given and keep one snapshot per name (the last saved). Every adapter passes
tests/integration/eventlog/test_snapshot_store.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

SNAPSHOT_METHODS = ("save_snapshot", "read_snapshot", "delete_snapshot")


@dataclass(frozen=True)
class Snapshot:
    name: str                                 # e.g. "matcher", "jobs"
    position: int                             # every event of the log up to this position is folded in
    schema: str                               # format, name and schema version of the state it holds
    data: bytes


class SnapshotStore(Protocol):
    def save_snapshot(self, snapshot: Snapshot) -> None:
        """Store the snapshot in place of any earlier one of the same name."""
        ...

    def read_snapshot(self, name: str) -> Snapshot | None:
        """The last snapshot saved under the name, None if there is none (or it was deleted)."""
        ...

    def delete_snapshot(self, name: str) -> bool:
        """Forget the name's snapshot; whether there was one."""
        ...


def snapshot_store(log: object) -> SnapshotStore | None:
    """The log as a snapshot store, None when it keeps no snapshots (a read-only view of the past)."""
    keeps = all(callable(getattr(log, method, None)) for method in SNAPSHOT_METHODS)
    return log if keeps else None  # type: ignore[return-value]
