"""Snapshots of a map of independent entries (an aggregate store's streams, the jobs view's jobs) whose
cost follows what changed: a base holds every entry, and a delta next to it (the snapshot named
`<name>+delta`) the entries set or removed since that base.

    snapshots = MapSnapshots(log, "jobs", Schema(dict[str, JobView], SNAPSHOT_VERSION))
    position, entries = snapshots.load() or (0, {})   # the base with its delta applied
    ...
    snapshots.changed.add(key)                         # as each entry is set or removed
    snapshots.save(position, entries)

Each save writes one delta of every key changed since the base (so loading reads at most the base
and one delta), or a new base once those keys reach `rebase_fraction` of the base's entries (the
old delta is then deleted). The delta names its base by position and checksum: a delta whose base
was replaced (a newer base, another writer, a rebuild, a crash between writing a base and deleting
the old delta) is ignored, and the log after the base covers what it held.
Both are plain snapshots (sluice.runtime.snapshots) of the same schema version: same checks,
checksum and typed decoding; a base is the entries dict itself (its schema's type, `dict[K, V]`), a
delta a `Delta[K, V]`.
"""
from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
import typing
from dataclasses import dataclass, replace
from typing import Any, Callable, Collection, Generic, Hashable, Mapping, TypeVar

from sluice.runtime.snapshots import Schema, Snapshots

log = logging.getLogger(__name__)

SNAPSHOT_WRITER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sluice-snapshot")
"""Packs and writes big snapshots off the event loop (`MapSnapshots.write` of a `prepare`d save),
one at a time for every store of the process."""
WRITTEN_AT_STOP_SECONDS = 30.0


async def snapshots_written(timeout: float = WRITTEN_AT_STOP_SECONDS) -> None:
    """Wait until every snapshot submitted so far is written (the writer runs them in order): a
    service stopping waits for them before its log is closed under them."""
    try:
        await asyncio.wait_for(asyncio.wrap_future(SNAPSHOT_WRITER.submit(lambda: None)), timeout)
    except TimeoutError:
        log.warning("snapshots still being written after %.0f s at stop: they are abandoned", timeout)


DELTA_SUFFIX = "+delta"
REBASE_FRACTION = 0.5
"""A new base once the entries changed since the last one are this share of it: a delta then costs
at most about half a base, and the base is rewritten after at least that much changed."""


K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True)
class Delta(Generic[K, V]):
    base: bytes
    """The checksum of the base snapshot it applies to."""
    base_position: int
    changed: dict[K, V]
    """Every entry set since the base (its current value)."""
    deleted: tuple[K, ...]
    """Every key the base or an earlier delta held that is gone."""


@dataclass(frozen=True)
class PendingSave:
    """What a save will write, taken on the caller's thread; `write` may run on another."""
    position: int
    base: dict | None
    delta: Delta | None
    generation: int

    @property
    def entries(self) -> dict:
        return self.base if self.base is not None else self.delta.changed

    def with_entries(self, entries: Mapping, position: int) -> PendingSave:
        """The same save at a later position, with these entries set (read further since)."""
        if not entries and position == self.position:
            return self
        if self.base is not None:
            return replace(self, position=position, base={**self.base, **entries})
        delta = self.delta
        return replace(self, position=position, delta=replace(
            delta, changed={**delta.changed, **entries}, deleted=tuple(k for k in delta.deleted if k not in entries)))


class MapSnapshots:
    """One named map snapshot (base and delta) in the log's snapshot store. One save at a time."""

    def __init__(self, log: object, name: str, schema: Schema, rebase_fraction: float = REBASE_FRACTION) -> None:
        """`schema.type`: the entries' type, `dict[K, V]`; the delta has the same version."""
        self._base = Snapshots(log, name, schema)
        key, value = typing.get_args(schema.type) or (Any, Any)
        self._delta = Snapshots(log, name + DELTA_SUFFIX, Schema(Delta[key, value], schema.version))
        self._rebase_fraction = rebase_fraction
        self.changed: set[Hashable] = set()
        """The keys set or removed since the base: whoever changes the map adds them. One set, kept
        and cleared in place (a second one in the aggregate store cost memory per schedule)."""
        self._generation = 0
        """Counts loads and deletes: a base written for an earlier generation is not this one's."""
        self._forget_base()

    @property
    def name(self) -> str:
        return self._base.name

    @property
    def schema(self) -> Schema:
        return self._base.schema

    @property
    def enabled(self) -> bool:
        return self._base.enabled

    def rebase(self) -> None:
        """Write a base at the next save (what was loaded is not used)."""
        self._forget_base()

    def _forget_base(self) -> None:
        self._generation += 1
        self._base_digest: bytes | None = None
        self._base_position = 0
        self._base_size = 0
        self.changed.clear()

    def load(self) -> tuple[int, Any] | None:
        """(position, entries) of the base with its delta applied (the base alone when the delta is
        missing, unusable or for another base); None when there is no usable base."""
        self._forget_base()
        loaded = self._base.load()
        if loaded is None or not isinstance(loaded[1], dict):
            return loaded
        position, entries = loaded
        self._base_digest, self._base_position, self._base_size = self._base.digest, position, len(entries)
        delta = self._delta.load()
        if delta is None:
            return loaded
        delta_position, changes = delta
        if (not isinstance(changes, Delta) or changes.base != self._base_digest or changes.base_position != position
                or delta_position < position or not isinstance(changes.changed, dict)):
            log.info("snapshot %s: its delta (at position %s) is not for the base at position %s: ignored",
                     self.name, delta_position, position)
            return loaded
        merged = {**entries, **changes.changed}
        for key in changes.deleted:
            merged.pop(key, None)
        self.changed.update(changes.changed)
        self.changed.update(changes.deleted)
        return delta_position, merged

    def save(self, position: int, entries: Mapping, changed: Collection[Hashable] = ()) -> bool:
        """Save `entries` (every entry up to `position`); `changed`: keys set or removed that were not
        added to `self.changed`. Whether it was saved."""
        return self.write(self.prepare(position, entries, changed))

    def prepare(self, position: int, entries: Mapping, changed: Collection[Hashable] = ()) -> PendingSave:
        """Take what to write now (the entries are read here, not later): a base when there is none
        or enough changed since it, else a delta."""
        self.changed.update(changed)
        if self._base_digest is None or len(self.changed) >= max(1.0, self._rebase_fraction * self._base_size):
            self.changed.clear()
            return PendingSave(position, dict(entries), None, self._generation)
        present = {key: entries[key] for key in self.changed if key in entries}
        deleted = tuple(key for key in self.changed if key not in present)
        return PendingSave(position, None, Delta(self._base_digest, self._base_position, present, deleted),
                           self._generation)

    def write(self, pending: PendingSave, pace: Callable[[], None] | None = None) -> bool:
        """`pace`: see snapshots.pack (a LoopPacer on the snapshot thread)."""
        if pending.base is None:
            return self._delta.save(pending.position, pending.delta, pace)
        saved = self._base.save(pending.position, pending.base, pace)
        if not saved or pending.generation != self._generation:
            # The stored base and delta stay valid (a delta names its base); the next save is a base.
            self._base_digest = None
            return saved
        self._base_digest, self._base_position, self._base_size = self._base.digest, pending.position, len(pending.base)
        try:
            self._delta.delete()  # the old base's: it would be read (and decoded) at the next load for nothing
        except Exception as error:
            log.warning("snapshot %s: the previous delta not deleted (it is ignored when loaded): %r", self.name, error)
        return True

    def delete(self) -> bool:
        """Forget base and delta; whether there was a base."""
        self._forget_base()
        deleted = self._base.delete()
        self._delta.delete()
        return deleted


def delete_map_snapshot(log: Any, name: str) -> None:
    """Drop a map snapshot's base and delta from the log's snapshot store (`sluice rebuild`)."""
    log.delete_snapshot(name)
    log.delete_snapshot(name + DELTA_SUFFIX)
