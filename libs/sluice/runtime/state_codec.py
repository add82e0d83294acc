"""Folded state <-> plain data (lists, strings, numbers, bytes, UTC datetimes) that msgpack carries, by
the state's declared type: what a snapshot stores (sluice.runtime.snapshots).

    codec = StateCodec(dict[str, Loaded[MatcherState]])
    plain = codec.encode(state, Packing(pace))
    state = codec.decode(plain, [])

Decoding only builds what the declared type names: its dataclasses (fields set as saved, as pickle
did: no __init__ or __post_init__ runs), enums by value, datetimes, timedeltas and the containers of
the hints (tuple, list, set, frozenset, dict, immutables.Map, FrozenMap). A field typed `Any` (or a bare
`tuple`) holds plain data only: scalars, datetimes and tuples, lists, sets and dicts of them, each
container tagged with one of a fixed set of kinds. Nothing is looked up by a name read from the
bytes, so bytes from anyone build nothing but data; bytes of the wrong shape raise StateUnusable.

Encodings, chosen by hint:
- a dataclass: the list of its field values, in field order; a dataclass met again within one
  `encode` (the same object: notifications shared by pending jobs) is its index among the
  dataclasses encoded before it, and decodes to one shared object again, as pickle's memo did;
- `A | B | ...` (two options or more, None aside): [option index, value];
- a mapping: [kind, key, value, key, value, ...] (kind: dict, immutables.Map, mappingproxy, FrozenMap;
  any other Mapping is read back as a dict, as sluice.eventlog.codec reads events);
- a datetime: itself when its zone is UTC (msgpack's timestamp), else [ISO local time, zone, fold]
  (a ZoneInfo key, an offset in seconds, or None when naive);
- an integer: itself, within msgpack's range (-2**63 .. 2**64-1): a state holding a bigger one is
  not snapshotted (the save fails, logged) and recovery folds the log;
- a timedelta: [days, seconds, microseconds]; an enum: its value.
A container of more than RAW_FROM items has each item encoded to msgpack as it is converted.

The work is in sluice.runtime.state_encoding and state_decoding (compiled per type hint, as
sluice.eventlog.codec's decoders are); state_hints holds what they share.
"""
from __future__ import annotations

from typing import Any, Callable

from sluice.runtime.state_decoding import decoder
from sluice.runtime.state_encoding import RAW_FROM, YIELD_EVERY, Packing, encoder
from sluice.runtime.state_hints import StateUnusable

__all__ = ["StateCodec", "StateUnusable", "Packing", "YIELD_EVERY", "RAW_FROM"]


class StateCodec:
    """Encode and decode values of one declared type."""

    def __init__(self, hint: Any) -> None:
        self.hint = hint
        self.encode: Callable[[Any, Packing], Any] = encoder(hint, ())
        self._decode: Callable[[Any, list], Any] | None = None
        """Compiled at the first decode: a process that only writes snapshots keeps no decoders."""

    def decode(self, plain: Any, table: list | None = None) -> Any:
        if self._decode is None:
            self._decode = decoder(self.hint, ())
        try:
            return self._decode(plain, [] if table is None else table)
        except StateUnusable:
            raise
        except Exception as error:  # bytes of another shape: an index out of range, a bad enum value, ...
            raise StateUnusable(f"not a {self.hint}: {error!r}") from error
