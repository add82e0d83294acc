"""Snapshots of folded state, so that recovery reads a snapshot and the log after it, not all history.

    SNAPSHOT_VERSION = 1                       # next to the state: bumped when its shape changes
    snapshots = Snapshots(log, "lineage", Schema(dict[str, RunFacts], SNAPSHOT_VERSION))
    loaded = snapshots.load()                  # (position, state) or None: fold from the start
    ...
    snapshots.save(position, state)            # every event up to `position` is in `state`

A snapshot is never trusted blindly. It records its name and the version of its state's schema, so a
snapshot of another version (an older or newer release whose state has another shape) is ignored;
its bytes carry a SHA-256, so a damaged one is ignored; and it is plain msgpack decoded by the
state's declared type (sluice.runtime.state_codec), which builds only that type's dataclasses,
enums, datetimes and containers: no pickle, no class or function named by the bytes, so whoever can
write to the event store cannot run code through a snapshot. An ignored snapshot costs one full
fold, nothing else: the next save replaces it. A developer who changes the shape of a state (a
field added, removed, retyped) bumps its SNAPSHOT_VERSION; changing code, comments or the fold does
not discard snapshots (a changed fold that needs its state refolded bumps the version too).

Bytes: SHA-256 of the body, then the body, zlib-compressed: frames of a 4-byte length and msgpack,
the first [FORMAT, name, version, parts], then the state in one frame (parts = 0), or a dict of
more than PART_ENTRIES entries in `parts` frames of up to PART_ENTRIES entries each.
"""
from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import struct
import threading
import time
import typing
import zlib
from collections.abc import Mapping
from typing import Any, Callable

import msgspec

from sluice.eventlog.snapshots import Snapshot, snapshot_store
from sluice.runtime.heap import collector_paused
from sluice.runtime.state_codec import RAW_FROM, YIELD_EVERY, Packing, StateCodec

log = logging.getLogger(__name__)

__all__ = ["SNAPSHOT_EVERY", "YIELD_EVERY", "RAW_FROM", "PART_ENTRIES", "FORMAT", "Schema", "SnapshotUnusable", "pack", "unpack",
           "LoopPacer", "Snapshots"]

SNAPSHOT_EVERY = 2_000
"""Events folded since the last snapshot before a service writes a new one, or as many as the state
has entities (streams, jobs) if that is more, so that writing a large state stays a small share of
the work: what a recovery folds at most on top of its snapshot."""

PART_ENTRIES = 1_000
"""Entries of a dict per frame (see `pack`): each part has its own memo of shared dataclasses, freed
with it. (The GIL is held no longer for it: its entries were encoded one by one, see RAW_FROM.)"""
FORMAT = "msgpack-1"
"""The framing and state_codec's conventions: part of every snapshot's schema, bumped when they change."""
MAX_TURN_WAIT = 0.1
"""How long a paced packer waits for a turn of the loop before it packs one more chunk (see LoopPacer)."""

_LENGTH = struct.Struct(">I")
_ENCODER = msgspec.msgpack.Encoder()


class SnapshotUnusable(Exception):
    """Bytes that are not a snapshot this code can use."""


@dataclasses.dataclass(frozen=True)
class Schema:
    """What a snapshot holds: the state's declared type (what decoding builds), and its version, an
    integer the developer bumps when that type's shape changes (a constant next to the state)."""
    type: Any
    version: int

    @property
    def codec(self) -> StateCodec:
        return _codec(self.type)

    def id(self, name: str) -> str:
        """What the store records next to a snapshot's bytes: format, name and version."""
        return f"{FORMAT}:{name}:{self.version}"


_codecs: dict[Any, StateCodec] = {}


def _codec(hint: Any) -> StateCodec:
    codec = _codecs.get(hint)
    if codec is None:
        codec = _codecs[hint] = StateCodec(hint)
    return codec


def _entries_type(hint: Any) -> Any | None:
    """dict[K, V] for a state declared as one (or as a Mapping): what a big state is split into parts of."""
    origin = typing.get_origin(hint) or hint
    if origin is dict or origin is Mapping:
        args = typing.get_args(hint)
        return dict[args] if args else dict
    return None


def pack(state: Any, schema: Schema, name: str, pace: Callable[[], None] | None = None) -> bytes:
    """`pace` is called between chunks of YIELD_EVERY dataclasses and between parts (default: release
    the GIL once).

    A dict of more than PART_ENTRIES entries (a map snapshot's base) is written in parts of
    PART_ENTRIES entries: each part's memo (the dataclasses it wrote, so that an object shared
    between entries is written once and shared again when read) is freed with it. Objects shared
    across parts are written once per part. A big container's items are encoded as they are
    converted (state_codec.RAW_FROM), so no msgpack encode holds the GIL for long."""
    pace = pace or _release_gil
    entries = _entries_type(schema.type)
    frames: list[bytes] = []
    with collector_paused():
        if entries is not None and type(state) is dict and len(state) > PART_ENTRIES:
            codec, items = _codec(entries), list(state.items())
            starts = range(0, len(items), PART_ENTRIES)
            frames.append(_ENCODER.encode([FORMAT, name, schema.version, len(starts)]))
            for start in starts:
                plain = codec.encode(dict(items[start:start + PART_ENTRIES]), Packing(pace))
                pace()
                frames.append(_ENCODER.encode(plain))
                del plain
        else:
            frames.append(_ENCODER.encode([FORMAT, name, schema.version, 0]))
            frames.append(_ENCODER.encode(schema.codec.encode(state, Packing(pace))))
    body = zlib.compress(b"".join(_LENGTH.pack(len(frame)) + frame for frame in frames), 1)
    return hashlib.sha256(body).digest() + body


def unpack(data: bytes, schema: Schema, name: str) -> Any:
    digest, body = data[:32], data[32:]
    if len(digest) < 32 or hashlib.sha256(body).digest() != digest:
        raise SnapshotUnusable("checksum mismatch")
    try:
        with collector_paused():
            frames = _frames(zlib.decompress(body))
            header = msgspec.msgpack.decode(next(frames))
            if header[:3] != [FORMAT, name, schema.version] or type(header[3]) is not int:
                raise SnapshotUnusable(f"a snapshot of {header[:3]!r}, not {[FORMAT, name, schema.version]!r}")
            parts = header[3]
            if parts == 0:
                state = schema.codec.decode(msgspec.msgpack.decode(next(frames)))
            else:
                codec, state = _codec(_entries_type(schema.type)), {}
                for _ in range(parts):
                    state.update(codec.decode(msgspec.msgpack.decode(next(frames))))
            if next(frames, None) is not None:
                raise SnapshotUnusable("bytes after the state")
            return state
    except SnapshotUnusable:
        raise
    except Exception as error:  # any failure to rebuild (StateUnusable included) means: fold the log instead
        raise SnapshotUnusable(f"cannot rebuild the state: {error!r}") from error


def _frames(body: bytes) -> typing.Iterator[memoryview]:
    view, offset = memoryview(body), 0
    while offset < len(view):
        if offset + 4 > len(view):
            raise SnapshotUnusable("a truncated frame")
        (length,) = _LENGTH.unpack_from(view, offset)
        offset += 4
        if offset + length > len(view):
            raise SnapshotUnusable("a truncated frame")
        yield view[offset:offset + length]
        offset += length


def _release_gil() -> None:
    time.sleep(0)


class LoopPacer:
    """Paces a snapshot packed on a worker thread by an event loop: one chunk per turn of the loop.

    Between chunks the packer waits, without the GIL, until a callback of its own has run on the
    loop. The loop then waits for the GIL one chunk at most, and only once per turn. A bare
    `sleep(0)` mostly took the GIL straight back: while the matcher's 10,000 states packed, each time
    the loop wanted the GIL (after every SQLite call) it waited up to the switch interval, and the
    loop lagged behind its notifications. A loop that does not turn for MAX_TURN_WAIT (a burst of
    work in one call: a minute's timers) gets one chunk per MAX_TURN_WAIT meanwhile: the snapshot
    goes on, slowly, instead of taking the GIL from the burst (docs/decisions.md). Pacing ends when
    the loop stops running, and on `stop()` (the loop's thread is about to wait for the packer)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._turn = threading.Event()
        self._turn.set()  # set: no callback of this pacer's is waiting on the loop
        self._stopped = False

    def __call__(self) -> None:
        if self._stopped or not self._loop.is_running():
            _release_gil()
            return
        if self._turn.is_set():  # else the loop has not run the last callback yet
            self._turn.clear()
            try:
                self._loop.call_soon_threadsafe(self._turn.set)
            except RuntimeError:  # the loop closed
                self._stopped = True
                return
        self._turn.wait(MAX_TURN_WAIT)

    def stop(self) -> None:
        """Pack on without waiting for the loop (its thread is about to wait for the packer)."""
        self._stopped = True
        self._turn.set()


class Snapshots:
    """One named snapshot in the log's snapshot store (none when the log keeps none, e.g. a view of the past)."""

    def __init__(self, log: object, name: str, schema: Schema) -> None:
        self._store = snapshot_store(log)
        self.name = name
        self.schema = schema
        self.digest: bytes | None = None
        """The checksum of the snapshot this object last loaded or saved: what identifies its bytes."""

    @property
    def enabled(self) -> bool:
        return self._store is not None

    def load(self) -> tuple[int, Any] | None:
        """(position, state) of the last usable snapshot; None (logged) when there is none or it is unusable."""
        if self._store is None:
            return None
        snapshot = self._store.read_snapshot(self.name)
        if snapshot is None:
            return None
        expected = self.schema.id(self.name)
        if snapshot.schema != expected:
            log.warning("snapshot %s at position %s is of another schema (%s, this is %s): folding the whole log",
                        self.name, snapshot.position, snapshot.schema[:80], expected)
            return None
        try:
            state = unpack(snapshot.data, self.schema, self.name)
        except SnapshotUnusable as error:
            log.warning("snapshot %s at position %s is unusable (%s): folding the whole log",
                        self.name, snapshot.position, str(error)[:200])
            return None
        self.digest = snapshot.data[:32]
        return snapshot.position, state

    def save(self, position: int, state: Any, pace: Callable[[], None] | None = None) -> bool:
        """Whether it was saved: a snapshot that cannot be written (the store is unreachable) costs a
        longer recovery later, so it is logged, never raised into the operation that triggered it."""
        if self._store is None:
            return False
        try:
            data = pack(state, self.schema, self.name, pace)
            self._store.save_snapshot(Snapshot(self.name, position, self.schema.id(self.name), data))
        except Exception as error:
            log.warning("snapshot %s at position %s not saved: %r", self.name, position, error)
            return False
        self.digest = data[:32]
        return True

    def delete(self) -> bool:
        return self._store is not None and self._store.delete_snapshot(self.name)
