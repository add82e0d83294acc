"""State -> plain data for msgpack, by declared type (see sluice.runtime.state_codec)."""
from __future__ import annotations

import dataclasses
import enum
import operator
import typing
from collections.abc import Mapping
from datetime import date, datetime, timedelta, timezone
from types import NoneType
from typing import Any, Callable
from zoneinfo import ZoneInfo

import msgspec

from sluice.runtime.state_hints import (ANY_DATETIME, ANY_DICT, ANY_FROZENSET, ANY_LIST, ANY_SET, ANY_TIMEDELTA,
                                        ANY_TUPLE, MAPPING_KINDS, SCALARS, Env, field_hints, optional_of, resolve,
                                        union_options)

YIELD_EVERY = 64
"""Dataclasses encoded between two calls of the packing's `pace`: a chunk. Paced by the event loop
(snapshots.LoopPacer), the loop waits for the GIL one chunk at most, so chunks are small: larger ones
showed in embedded mode's tail latency while the matcher's base packed (docs/decisions.md)."""


RAW_FROM = 64
"""A container of more items is encoded to msgpack item by item as it is converted (each one
msgspec.Raw, copied as is by the final encode): msgpack encoding runs in C holding the GIL, so one
encode of a whole part held it for all of its items at once, and a checker's queue of many
jobs would hold it for all of them. Paced conversion, then, and no long encode after it."""

_ENCODER = msgspec.msgpack.Encoder()
_Raw = msgspec.Raw


class Packing:
    """One encoding's memo (dataclasses already written, by id) and pacing."""

    __slots__ = ("memo", "count", "pace")

    def __init__(self, pace: Callable[[], None] | None = None) -> None:
        self.memo: dict[int, int] = {}
        self.count = 0
        self.pace = pace or _nothing


def _nothing() -> None:
    pass


_encoders: dict[tuple[Any, Env], Callable[[Any, Packing], Any]] = {}


def _same(value: Any, packing: Any = None) -> Any:
    return value


def encoder(hint: Any, env: Env) -> Callable[[Any, Packing], Any]:
    hint = resolve(hint, env)
    key = (hint, env)
    found = _encoders.get(key)
    if found is None:
        origin = typing.get_origin(hint) or hint
        if dataclasses.is_dataclass(origin):  # a placeholder while compiling: its hints may refer to it
            _encoders[key] = _dataclass_encoder(origin, typing.get_args(hint), env)
            found = _compiled_dataclass_encoder(origin, typing.get_args(hint), env)
        else:
            found = _make_encoder(hint, env)
        _encoders[key] = found
    return found


def _make_encoder(hint: Any, env: Env) -> Callable[[Any, Packing], Any]:
    if hint in SCALARS or typing.get_origin(hint) is typing.Literal:
        return _same
    if hint is Any or hint is object:
        return _encode_any
    options = union_options(hint)
    if options is not None:
        return _union_encoder(options, env)
    origin, args = typing.get_origin(hint) or hint, typing.get_args(hint)
    if dataclasses.is_dataclass(origin):
        return _dataclass_encoder(origin, args, env)
    if not isinstance(origin, type):
        raise TypeError(f"a snapshot cannot hold {hint!r}")
    if issubclass(origin, enum.Enum):
        return _encode_enum
    if origin is datetime:
        return encode_datetime
    if origin is timedelta:
        return _encode_timedelta
    if origin is date:
        return lambda value, packing: value.isoformat()
    if issubclass(origin, Mapping):
        keys, values = (encoder(args[0], env), encoder(args[1], env)) if args else (_encode_any, _encode_any)
        return _mapping_encoder(keys, values)
    if origin in (tuple, list, set, frozenset):
        if origin is tuple and not args:
            return _encode_any  # a bare tuple: whatever it holds, tagged
        if origin is tuple and (len(args) != 2 or args[1] is not Ellipsis):
            items = [encoder(arg, env) for arg in args]
            return lambda value, packing: [item(v, packing) for item, v in zip(items, value)]
        item = encoder(args[0], env) if args else _encode_any
        if item is _same:
            return lambda value, packing: list(value)
        return _items_encoder(item)
    raise TypeError(f"a snapshot cannot hold {hint!r}")


def _encode_enum(value: Any, packing: Packing) -> Any:
    return value.value


def encode_datetime(value: datetime, packing: Packing) -> Any:
    zone = value.tzinfo
    if zone is timezone.utc and not value.fold:
        return value
    if zone is None:
        place = None
    elif isinstance(zone, ZoneInfo):
        place = zone.key
    elif isinstance(zone, timezone):
        place = zone.utcoffset(None).total_seconds()
    else:
        raise TypeError(f"a snapshot cannot hold a datetime in {zone!r}")
    return [value.replace(tzinfo=None).isoformat(), place, value.fold]


def _encode_timedelta(value: timedelta, packing: Packing) -> Any:
    return [value.days, value.seconds, value.microseconds]


def _mapping_encoder(keys: Callable, values: Callable) -> Callable[[Any, Packing], Any]:
    def encode(value: Any, packing: Packing) -> list:
        kind = MAPPING_KINDS.get(type(value), 0)  # another Mapping is read back a dict, as events' are
        flat = [kind]
        append = flat.append
        if len(value) > RAW_FROM and values is not _same:
            for k, v in value.items():
                append(keys(k, packing))
                append(_Raw(_ENCODER.encode(values(v, packing))))
            return flat
        for k, v in value.items():
            append(keys(k, packing))
            append(values(v, packing))
        return flat
    return encode


def _items_encoder(item: Callable) -> Callable[[Any, Packing], Any]:
    def encode(value: Any, packing: Packing) -> list:
        if len(value) > RAW_FROM:
            return [_Raw(_ENCODER.encode(item(v, packing))) for v in value]
        return [item(v, packing) for v in value]
    return encode


def _union_encoder(options: tuple[Any, ...], env: Env) -> Callable[[Any, Packing], Any]:
    others = [option for option in options if option is not NoneType]
    if len(others) == 1:
        only = encoder(others[0], env)
        if only is _same:
            return _same
        return lambda value, packing: None if value is None else only(value, packing)
    by_type: dict[type, tuple[int, Callable]] = {}
    classes = []
    for index, option in enumerate(others):
        resolved = resolve(option, env)
        cls = typing.get_origin(resolved) or resolved
        classes.append((cls, index, resolved))

    def encode(value: Any, packing: Packing) -> Any:
        if value is None:
            return None
        found = by_type.get(type(value))
        if found is None:
            for cls, index, resolved in classes:
                if isinstance(cls, type) and isinstance(value, cls):
                    found = by_type[type(value)] = (index, encoder(resolved, env))
                    break
            else:
                raise TypeError(f"a {type(value).__name__} is none of {options}")
        return [found[0], found[1](value, packing)]
    return encode


def _dataclass_encoder(cls: type, args: tuple, env: Env) -> Callable[[Any, Packing], Any]:
    compiled: list[Callable] = []

    def encode(value: Any, packing: Packing) -> Any:  # compiled at the first value: hints may be recursive
        if not compiled:
            compiled.append(_compiled_dataclass_encoder(cls, args, env))
        return compiled[0](value, packing)
    return encode


def _compiled_dataclass_encoder(cls: type, args: tuple, env: Env) -> Callable[[Any, Packing], Any]:
    fields = field_hints(cls, args, env)
    names = [name for name, _, _ in fields]
    namespace: dict[str, Any] = {"cls": cls, "YIELD_EVERY": YIELD_EVERY, "_id": id, "_type": type,
                                 "TypeError": TypeError, "values": operator.attrgetter(*names) if names else None}
    items = []
    for index, (name, hint, inner) in enumerate(fields):
        encode, optional = encoder(hint, inner), optional_of(hint, inner)
        if encode is _same:
            items.append(f"v{index}")
        elif optional is not None and encoder(optional, inner) is not _same:  # `X | None`: None inline
            namespace[f"e{index}"] = encoder(optional, inner)
            items.append(f"None if v{index} is None else e{index}(v{index}, packing)")
        else:
            namespace[f"e{index}"] = encode
            items.append(f"e{index}(v{index}, packing)")
    unpack = f"    {', '.join(f'v{i}' for i in range(len(names)))} = values(value)\n" if names else ""
    source = (
        "def encode(value, packing):\n"
        "    memo = packing.memo\n"
        "    key = _id(value)\n"
        "    seen = memo.get(key)\n"
        "    if seen is not None:\n"
        "        return seen\n"
        "    if _type(value) is not cls:\n"
        "        raise TypeError(f'a {_type(value).__name__} where a {cls.__name__} is declared')\n"
        "    packing.count += 1\n"
        "    if packing.count % YIELD_EVERY == 0:\n"
        "        packing.pace()\n"
        f"{unpack}"
        f"    plain = [{', '.join(items)}]\n"
        "    memo[key] = len(memo)\n"
        "    return plain\n")
    exec(source, namespace)
    return namespace["encode"]


def _encode_any(value: Any, packing: Packing = None) -> Any:
    """Plain data of no declared type: scalars as they are, containers and zoned datetimes tagged."""
    cls = type(value)
    if cls in (str, int, float, bool, bytes, NoneType):
        return value
    if cls is tuple:
        return [ANY_TUPLE, *[_encode_any(v) for v in value]]
    if cls is datetime:
        if value.tzinfo is timezone.utc and not value.fold:
            return value
        return [ANY_DATETIME, *encode_datetime(value, packing)]
    if cls is list:
        return [ANY_LIST, *[_encode_any(v) for v in value]]
    if cls is frozenset or cls is set:
        return [ANY_FROZENSET if cls is frozenset else ANY_SET, *[_encode_any(v) for v in value]]
    if cls is dict:
        flat = [ANY_DICT]
        for k, v in value.items():
            flat.append(_encode_any(k))
            flat.append(_encode_any(v))
        return flat
    if cls is timedelta:
        return [ANY_TIMEDELTA, value.days, value.seconds, value.microseconds]
    raise TypeError(f"a snapshot cannot hold a {cls.__name__} where no type is declared")
