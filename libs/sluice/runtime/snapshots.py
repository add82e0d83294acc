"""Snapshots of folded state, so that recovery reads a snapshot and the log after it, not all history.

    snapshots = Snapshots(log, "jobs", schema_of(JobView, JobsView.apply))
    loaded = snapshots.load()                  # (position, state) or None: fold from the start
    ...
    snapshots.save(position, state)            # every event up to `position` is in `state`

A snapshot is never trusted blindly. Its schema is a fingerprint of the source of every module
that defines the state's classes and the code that folds it, so a snapshot written by other code
(an older or newer release, a patched fold) is ignored; its bytes carry a SHA-256, so a damaged
one is ignored; and unpickling only builds Sluice's own classes and plain data (no arbitrary
callables), so whoever can write to the event store cannot run code through a snapshot. An
ignored snapshot costs one full fold, nothing else: the next save replaces it.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import hashlib
import importlib
import io
import logging
import operator
import pickle
import sys
import threading
import time
import typing
import zlib
from functools import cache
from typing import Any, Callable

from sluice.eventlog.snapshots import Snapshot, snapshot_store

log = logging.getLogger(__name__)

SNAPSHOT_EVERY = 2_000
"""Events folded since the last snapshot before a service writes a new one, or as many as the state
has entities (streams, jobs) if that is more, so that writing a large state stays a small share of
the work: what a recovery folds at most on top of its snapshot."""

YIELD_EVERY = 64
"""Objects a snapshot's pickler reduces between two releases of the GIL (~0.1 ms of packing): a
chunk. Paced by the event loop (LoopPacer), the loop waits for the GIL one chunk at most: with
chunks of 256, embedded 200/s p99 was 10.7 ms while the matcher's base packed, 4.8 ms with 64."""
PART_ENTRIES = 1_000
"""Entries of a dict per pickle (see `pack`): ~1 ms to free a part's memo."""
PACK_FORMAT = b"parts-1"
"""Part of every schema: code that packs another way does not read these snapshots (a reader of
single pickles would take the first part for the whole state)."""
MAX_TURN_WAIT = 0.1
"""How long a paced packer waits for a turn of the loop before it packs on unpaced (see LoopPacer)."""

_SAFE_MODULES = frozenset({"builtins", "datetime", "zoneinfo", "collections", "copyreg", "enum", "decimal",
                           "_codecs"})
_SAFE_BUILTINS = frozenset({"frozenset", "set", "tuple", "list", "dict", "bytes", "bytearray", "str", "int",
                            "float", "bool", "complex", "object", "getattr", "slice", "range", "NoneType"})


class SnapshotUnusable(Exception):
    """Bytes that are not a snapshot this code can use."""


def schema_of(*parts: object) -> str:
    """A fingerprint of the code behind a state: the source of the modules defining `parts` (classes,
    functions) and every dataclass reachable from their type hints, and the packing format."""
    modules: set[str] = set()
    for part in parts:
        modules |= _modules_of(part)
    digest = hashlib.sha256(PACK_FORMAT)
    for name in sorted(modules):
        digest.update(name.encode() + b"\0" + _module_source(name) + b"\0")
    return digest.hexdigest()[:32]


def pack(state: Any, pace: Callable[[], None] | None = None) -> bytes:
    """`pace` is called between chunks of YIELD_EVERY objects (default: release the GIL once).

    A dict of more than PART_ENTRIES entries (a map snapshot's base) is pickled as `_Parts` and then
    one pickle per part: a pickler's memo holds every object it wrote, tuples made for the purpose
    included, and freeing it is one pause that no thread switch interrupts (10,000 matcher states:
    ~11 ms, a loop lag as long). Objects shared across parts are written once per part."""
    buffer, pace = io.BytesIO(), pace or _release_gil
    pickles = [state]
    if type(state) is dict and len(state) > PART_ENTRIES:
        items = list(state.items())
        parts = [dict(items[start:start + PART_ENTRIES]) for start in range(0, len(items), PART_ENTRIES)]
        pickles = [_Parts(len(parts)), *parts]
    with _collector_paused():
        for part in pickles:
            _FieldPickler(buffer, pace).dump(part)
    body = zlib.compress(buffer.getvalue(), 1)
    return hashlib.sha256(body).digest() + body


@dataclasses.dataclass(frozen=True)
class _Parts:
    """The state is a dict, in this many pickles after this one."""
    count: int


def unpack(data: bytes) -> Any:
    digest, body = data[:32], data[32:]
    if len(digest) < 32 or hashlib.sha256(body).digest() != digest:
        raise SnapshotUnusable("checksum mismatch")
    try:
        with _collector_paused():
            stream = io.BytesIO(zlib.decompress(body))
            state = _RestrictedUnpickler(stream).load()
            if not isinstance(state, _Parts):
                return state
            merged: dict = {}
            for _ in range(state.count):
                part = _RestrictedUnpickler(stream).load()
                if type(part) is not dict:
                    raise SnapshotUnusable(f"a part of a dict is a {type(part).__name__}")
                merged.update(part)
            return merged
    except SnapshotUnusable:
        raise
    except Exception as error:  # any failure to rebuild means: fold the log instead
        raise SnapshotUnusable(f"cannot rebuild the state: {error!r}") from error


@contextlib.contextmanager
def _collector_paused():
    """No cyclic garbage collection while (un)pickling: the pickler's memo keeps every tuple it
    writes alive until the end, and the unpickler builds the whole state, so the collector ran full
    collections over the whole heap again and again (half of packing a jobs view, and pauses of
    ~50 ms). Reference counting still frees what they drop; the collector runs again after."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _release_gil() -> None:
    time.sleep(0)


class LoopPacer:
    """Paces a snapshot packed on a worker thread by an event loop: one chunk per turn of the loop.

    Between chunks the packer waits, without the GIL, until a callback of its own has run on the
    loop. The loop then waits for the GIL one chunk at most, and only once per turn. A bare
    `sleep(0)` mostly took the GIL straight back: while the matcher's 10,000 states packed, each time
    the loop wanted the GIL (after every SQLite call) it waited up to the switch interval, and the
    loop lagged 12 ms at 200 notifications/s. Pacing ends when the loop stops running or takes
    longer than MAX_TURN_WAIT to turn (it is blocked: then the packer must not wait on it), and on `stop()`."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._turn = threading.Event()
        self._stopped = False

    def __call__(self) -> None:
        if self._stopped or not self._loop.is_running():
            _release_gil()
            return
        self._turn.clear()
        try:
            self._loop.call_soon_threadsafe(self._turn.set)
        except RuntimeError:  # the loop closed
            self._stopped = True
            return
        if not self._turn.wait(MAX_TURN_WAIT):
            self._stopped = True

    def stop(self) -> None:
        """Pack on without waiting for the loop (its thread is about to wait for the packer)."""
        self._stopped = True
        self._turn.set()


class Snapshots:
    """One named snapshot in the log's snapshot store (none when the log keeps none, e.g. a view of the past)."""

    def __init__(self, log: object, name: str, schema: str) -> None:
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
        if snapshot.schema != self.schema:
            log.warning("snapshot %s at position %s was written by other code (schema %s, this is %s): "
                        "folding the whole log", self.name, snapshot.position, snapshot.schema, self.schema)
            return None
        try:
            state = unpack(snapshot.data)
        except SnapshotUnusable as error:
            log.warning("snapshot %s at position %s is unusable (%s): folding the whole log",
                        self.name, snapshot.position, error)
            return None
        self.digest = snapshot.data[:32]
        return snapshot.position, state

    def save(self, position: int, state: Any, pace: Callable[[], None] | None = None) -> bool:
        """Whether it was saved: a snapshot that cannot be written (the store is unreachable) costs a
        longer recovery later, so it is logged, never raised into the operation that triggered it."""
        if self._store is None:
            return False
        try:
            data = pack(state, pace)
            self._store.save_snapshot(Snapshot(self.name, position, self.schema, data))
        except Exception as error:
            log.warning("snapshot %s at position %s not saved: %r", self.name, position, error)
            return False
        self.digest = data[:32]
        return True

    def delete(self) -> bool:
        return self._store is not None and self._store.delete_snapshot(self.name)


class _FieldPickler(pickle.Pickler):
    """Dataclasses go by their field values. Pickle's default reads an object's `__dict__`, and
    CPython then materialises that dict and keeps it for the object's lifetime: about 100 bytes
    more on every schedule, trigger and notification a snapshot ever held."""

    _reduced = 0

    def __init__(self, file: io.BytesIO, pace: Callable[[], None]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._pace = pace

    def reducer_override(self, obj: Any) -> Any:
        self._reduced += 1
        if self._reduced % YIELD_EVERY == 0:
            self._pace()  # lets a waiting thread (the event loop) take the GIL
        cls = type(obj)
        values = _VALUES.get(cls, _UNKNOWN)
        if values is _UNKNOWN:
            values = _VALUES[cls] = _values_getter(cls)
        if values is None:
            return NotImplemented
        return _from_fields, (cls, values(obj))


_UNKNOWN = object()
_VALUES: dict[type, Any] = {}


def _values_getter(cls: type) -> Any:
    fields = _field_names(cls)
    if not fields:
        return None
    names = operator.attrgetter(*fields)
    return names if len(fields) > 1 else lambda obj: (names(obj),)


def _from_fields(cls: type, values: tuple) -> Any:
    fields = _field_names(cls)
    if fields is None or len(fields) != len(values):
        raise SnapshotUnusable(f"{cls!r} does not have the fields it was saved with")
    obj = cls.__new__(cls)
    for name, value in zip(fields, values):
        object.__setattr__(obj, name, value)  # frozen dataclasses: as their generated __init__ does
    return obj


@cache
def _field_names(cls: type) -> tuple[str, ...] | None:
    if not isinstance(cls, type) or not dataclasses.is_dataclass(cls):
        return None
    return tuple(field.name for field in dataclasses.fields(cls))


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module == "builtins" and name not in _SAFE_BUILTINS:
            raise SnapshotUnusable(f"refusing to build builtins.{name}")
        if module in _SAFE_MODULES or module == "sluice" or module.startswith(("sluice.", "sluice_services.", "immutables.")):
            return super().find_class(module, name)
        raise SnapshotUnusable(f"refusing to build {module}.{name}")


def _modules_of(part: object) -> set[str]:
    found: set[str] = set()
    seen: set[object] = set()

    def visit(item: object) -> None:
        if item in seen or item is None:
            return
        seen.add(item)
        for arg in typing.get_args(item):
            visit(arg)
        module = getattr(item, "__module__", None)
        if not module or not module.startswith(("sluice", "sluice_services")):
            return
        found.add(module)
        if dataclasses.is_dataclass(item) or callable(item):
            for hint in _hints(item).values():
                visit(hint)

    visit(part)
    return found


def _hints(item: object) -> dict[str, Any]:
    try:
        return typing.get_type_hints(item)
    except Exception:  # a hint that does not resolve: the module's source still counts
        return {}


@cache
def _module_source(name: str) -> bytes:
    module = sys.modules.get(name) or importlib.import_module(name)
    path = getattr(module, "__file__", None)
    if path is None:
        return name.encode()
    with open(path, "rb") as source:
        return source.read()

