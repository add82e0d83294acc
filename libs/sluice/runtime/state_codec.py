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
  any other Mapping is read back as a dict, as sluice.domain.codec reads events);
- a datetime: itself when its zone is UTC (msgpack's timestamp), else [ISO local time, zone, fold]
  (a ZoneInfo key, an offset in seconds, or None when naive);
- an integer: itself, within msgpack's range (-2**63 .. 2**64-1): a state holding a bigger one is
  not snapshotted (the save fails, logged) and recovery folds the log;
- a timedelta: [days, seconds, microseconds]; an enum: its value.
"""
from __future__ import annotations

import dataclasses
import enum
import operator
import typing
from collections.abc import Mapping
from datetime import date, datetime, timedelta, timezone
from types import MappingProxyType, NoneType, UnionType
from typing import Any, Callable
from zoneinfo import ZoneInfo

import immutables
import msgspec

from sluice.domain.triggers.specs import FrozenMap

YIELD_EVERY = 64
"""Dataclasses encoded between two calls of the packing's `pace` (~0.1 ms of packing): a chunk. Paced
by the event loop (snapshots.LoopPacer), the loop waits for the GIL one chunk at most: with chunks of
256, embedded 200/s p99 was 10.7 ms while the matcher's base packed, 4.8 ms with 64."""


RAW_FROM = 64
"""A container of more items is encoded to msgpack item by item as it is converted (each one
msgspec.Raw, copied as is by the final encode): msgpack encoding runs in C holding the GIL, so one
encode of a whole part (1,000 matcher states) held it ~2.5 ms, and a checker's queue of 10,000
jobs would hold it for all of them. Paced conversion, then, and no long encode after it."""

_ENCODER = msgspec.msgpack.Encoder()
_Raw = msgspec.Raw


class StateUnusable(Exception):
    """Plain data that is not a value of the declared type."""


class Packing:
    """One encoding's memo (dataclasses already written, by id) and pacing."""

    __slots__ = ("memo", "count", "pace")

    def __init__(self, pace: Callable[[], None] | None = None) -> None:
        self.memo: dict[int, int] = {}
        self.count = 0
        self.pace = pace or _nothing


def _nothing() -> None:
    pass


class StateCodec:
    """Encode and decode values of one declared type."""

    def __init__(self, hint: Any) -> None:
        self.hint = hint
        self.encode: Callable[[Any, Packing], Any] = _encoder(hint, ())
        self._decode: Callable[[Any, list], Any] = _decoder(hint, ())

    def decode(self, plain: Any, table: list | None = None) -> Any:
        try:
            return self._decode(plain, [] if table is None else table)
        except StateUnusable:
            raise
        except Exception as error:  # bytes of another shape: an index out of range, a bad enum value, ...
            raise StateUnusable(f"not a {self.hint}: {error!r}") from error


Env = tuple  # ((TypeVar, hint), ...): what a generic dataclass's parameters stand for


def _resolve(hint: Any, env: Env) -> Any:
    if isinstance(hint, typing.TypeVar):
        for var, value in env:
            if var is hint:
                return value
        return Any
    if type(hint) is typing.NewType:
        return hint.__supertype__
    return hint


_SCALARS = (str, int, float, bool, bytes, NoneType)


def _options(hint: Any) -> tuple[Any, ...] | None:
    if typing.get_origin(hint) in (typing.Union, UnionType):
        return typing.get_args(hint)
    return None


def _optional(hint: Any, env: Env) -> Any:
    """X for a hint `X | None` (X not itself a union), else None."""
    options = _options(_resolve(hint, env))
    if options is None or NoneType not in options or len(options) != 2:
        return None
    return next(option for option in options if option is not NoneType)


# -- encoding --------------------------------------------------------------------------------------

_encoders: dict[tuple[Any, Env], Callable[[Any, Packing], Any]] = {}


def _same(value: Any, packing: Any = None) -> Any:
    return value


def _encoder(hint: Any, env: Env) -> Callable[[Any, Packing], Any]:
    hint = _resolve(hint, env)
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
    if hint in _SCALARS or typing.get_origin(hint) is typing.Literal:
        return _same
    if hint is Any or hint is object:
        return _encode_any
    options = _options(hint)
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
        return _encode_datetime
    if origin is timedelta:
        return _encode_timedelta
    if origin is date:
        return lambda value, packing: value.isoformat()
    if issubclass(origin, Mapping):
        keys, values = (_encoder(args[0], env), _encoder(args[1], env)) if args else (_encode_any, _encode_any)
        return _mapping_encoder(keys, values)
    if origin in (tuple, list, set, frozenset):
        if origin is tuple and not args:
            return _encode_any  # a bare tuple: whatever it holds, tagged
        if origin is tuple and (len(args) != 2 or args[1] is not Ellipsis):
            items = [_encoder(arg, env) for arg in args]
            return lambda value, packing: [item(v, packing) for item, v in zip(items, value)]
        item = _encoder(args[0], env) if args else _encode_any
        if item is _same:
            return lambda value, packing: list(value)
        return _items_encoder(item)
    raise TypeError(f"a snapshot cannot hold {hint!r}")


def _encode_enum(value: Any, packing: Packing) -> Any:
    return value.value


def _encode_datetime(value: datetime, packing: Packing) -> Any:
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


_MAPPING_KINDS = {dict: 0, immutables.Map: 1, MappingProxyType: 2, FrozenMap: 3}
"""The mappings a snapshot holds, by a code that never changes (a new kind takes a new code)."""


def _mapping_encoder(keys: Callable, values: Callable) -> Callable[[Any, Packing], Any]:
    def encode(value: Any, packing: Packing) -> list:
        kind = _MAPPING_KINDS.get(type(value), 0)  # another Mapping is read back a dict, as events' are
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
        only = _encoder(others[0], env)
        if only is _same:
            return _same
        return lambda value, packing: None if value is None else only(value, packing)
    by_type: dict[type, tuple[int, Callable]] = {}
    classes = []
    for index, option in enumerate(others):
        resolved = _resolve(option, env)
        cls = typing.get_origin(resolved) or resolved
        classes.append((cls, index, resolved))

    def encode(value: Any, packing: Packing) -> Any:
        if value is None:
            return None
        found = by_type.get(type(value))
        if found is None:
            for cls, index, resolved in classes:
                if isinstance(cls, type) and isinstance(value, cls):
                    found = by_type[type(value)] = (index, _encoder(resolved, env))
                    break
            else:
                raise TypeError(f"a {type(value).__name__} is none of {options}")
        return [found[0], found[1](value, packing)]
    return encode


def _field_hints(cls: type, args: tuple, env: Env) -> list[tuple[str, Any, Env]]:
    inner = tuple(zip(getattr(cls, "__parameters__", ()), [_resolve(a, env) for a in args]))
    hints = typing.get_type_hints(cls)
    return [(f.name, hints.get(f.name, Any), inner) for f in dataclasses.fields(cls)]


def _dataclass_encoder(cls: type, args: tuple, env: Env) -> Callable[[Any, Packing], Any]:
    compiled: list[Callable] = []

    def encode(value: Any, packing: Packing) -> Any:  # compiled at the first value: hints may be recursive
        if not compiled:
            compiled.append(_compiled_dataclass_encoder(cls, args, env))
        return compiled[0](value, packing)
    return encode


def _compiled_dataclass_encoder(cls: type, args: tuple, env: Env) -> Callable[[Any, Packing], Any]:
    fields = _field_hints(cls, args, env)
    names = [name for name, _, _ in fields]
    namespace: dict[str, Any] = {"cls": cls, "YIELD_EVERY": YIELD_EVERY, "_id": id, "_type": type,
                                 "TypeError": TypeError, "values": operator.attrgetter(*names) if names else None}
    items = []
    for index, (name, hint, inner) in enumerate(fields):
        encode, optional = _encoder(hint, inner), _optional(hint, inner)
        if encode is _same:
            items.append(f"v{index}")
        elif optional is not None and _encoder(optional, inner) is not _same:  # `X | None`: None inline
            namespace[f"e{index}"] = _encoder(optional, inner)
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


_ANY_TUPLE, _ANY_LIST, _ANY_SET, _ANY_FROZENSET, _ANY_DICT, _ANY_DATETIME, _ANY_TIMEDELTA = range(7)


def _encode_any(value: Any, packing: Packing = None) -> Any:
    """Plain data of no declared type: scalars as they are, containers and zoned datetimes tagged."""
    cls = type(value)
    if cls in (str, int, float, bool, bytes, NoneType):
        return value
    if cls is tuple:
        return [_ANY_TUPLE, *[_encode_any(v) for v in value]]
    if cls is datetime:
        if value.tzinfo is timezone.utc and not value.fold:
            return value
        return [_ANY_DATETIME, *_encode_datetime(value, packing)]
    if cls is list:
        return [_ANY_LIST, *[_encode_any(v) for v in value]]
    if cls is frozenset or cls is set:
        return [_ANY_FROZENSET if cls is frozenset else _ANY_SET, *[_encode_any(v) for v in value]]
    if cls is dict:
        flat = [_ANY_DICT]
        for k, v in value.items():
            flat.append(_encode_any(k))
            flat.append(_encode_any(v))
        return flat
    if cls is timedelta:
        return [_ANY_TIMEDELTA, value.days, value.seconds, value.microseconds]
    raise TypeError(f"a snapshot cannot hold a {cls.__name__} where no type is declared")


# -- decoding --------------------------------------------------------------------------------------

_decoders: dict[tuple[Any, Env], Callable[[Any, list], Any]] = {}


def _decoder(hint: Any, env: Env) -> Callable[[Any, list], Any]:
    hint = _resolve(hint, env)
    key = (hint, env)
    found = _decoders.get(key)
    if found is None:
        origin = typing.get_origin(hint) or hint
        if dataclasses.is_dataclass(origin):  # a placeholder while compiling: its hints may refer to it
            _decoders[key] = _dataclass_decoder(origin, typing.get_args(hint), env)
            found = _compiled_dataclass_decoder(origin, typing.get_args(hint), env)
        else:
            found = _make_decoder(hint, env)
        _decoders[key] = found
    return found


def _checked(*classes: type) -> Callable[[Any, list], Any]:
    def decode(plain: Any, table: list) -> Any:
        if type(plain) not in classes:
            raise StateUnusable(f"a {type(plain).__name__} where a {classes[0].__name__} is declared")
        return plain
    decode.classes = classes  # type: ignore[attr-defined]
    return decode


_SCALAR_DECODERS = {str: _checked(str), int: _checked(int, bool), float: _checked(float, int), bool: _checked(bool),
                    bytes: _checked(bytes), NoneType: _checked(NoneType)}


def _make_decoder(hint: Any, env: Env) -> Callable[[Any, list], Any]:
    if hint in _SCALAR_DECODERS:
        return _SCALAR_DECODERS[hint]
    if typing.get_origin(hint) is typing.Literal:
        allowed = frozenset(typing.get_args(hint))
        return lambda plain, table: plain if plain in allowed else _refuse(plain, hint)
    if hint is Any or hint is object:
        return _decode_any
    options = _options(hint)
    if options is not None:
        return _union_decoder(options, env)
    origin, args = typing.get_origin(hint) or hint, typing.get_args(hint)
    if dataclasses.is_dataclass(origin):
        return _dataclass_decoder(origin, args, env)
    if not isinstance(origin, type):
        raise TypeError(f"a snapshot cannot hold {hint!r}")
    if issubclass(origin, enum.Enum):
        members = origin._value2member_map_  # by value, as Enum(value) finds them (KeyError: unusable)
        return lambda plain, table: members[plain]
    if origin is datetime:
        return _decode_datetime
    if origin is timedelta:
        return lambda plain, table: timedelta(*_sized(plain, 3))
    if origin is date:
        return lambda plain, table: date.fromisoformat(plain)
    if issubclass(origin, Mapping):
        keys, values = (_decoder(args[0], env), _decoder(args[1], env)) if args else (_decode_any, _decode_any)
        return _mapping_decoder(keys, values)
    if origin in (tuple, list, set, frozenset):
        if origin is tuple and not args:
            return _decode_any
        if origin is tuple and (len(args) != 2 or args[1] is not Ellipsis):
            items = [_decoder(arg, env) for arg in args]
            return lambda plain, table: tuple([item(v, table) for item, v in zip(items, _sized(plain, len(items)))])
        item = _decoder(args[0], env) if args else _decode_any
        build, classes = origin, getattr(item, "classes", None)

        def decode(plain: Any, table: list) -> Any:
            if type(plain) is not list:
                raise StateUnusable(f"a {type(plain).__name__} where a {build.__name__} is declared")
            if classes is None:
                return build([item(v, table) for v in plain])
            for v in plain:  # scalars: checked, not copied one by one
                if type(v) not in classes:
                    raise StateUnusable(f"a {type(v).__name__} where a {classes[0].__name__} is declared")
            return build(plain)
        return decode
    raise TypeError(f"a snapshot cannot hold {hint!r}")


def _refuse(plain: Any, hint: Any) -> Any:
    raise StateUnusable(f"{plain!r} is not a {hint}")


def _sized(plain: Any, size: int) -> list:
    if type(plain) is not list or len(plain) != size:
        raise StateUnusable(f"expected a list of {size}, got {type(plain).__name__}")
    return plain


def _decode_datetime(plain: Any, table: list) -> datetime:
    if type(plain) is datetime:
        return plain
    local, place, fold = _sized(plain, 3)
    value = datetime.fromisoformat(local)
    if value.tzinfo is not None or fold not in (0, 1):
        raise StateUnusable(f"not a local time: {local!r}")
    if place is None:
        zone = None
    elif type(place) is str:
        zone = ZoneInfo(place)
    elif type(place) in (int, float):
        zone = timezone(timedelta(seconds=place))
    else:
        raise StateUnusable(f"not a time zone: {place!r}")
    return value.replace(tzinfo=zone, fold=fold)


_EMPTY_MAP, _EMPTY_FROZEN_MAP = immutables.Map(), FrozenMap()
_MAPPING_BUILDERS = (dict, lambda items: immutables.Map(items) if items else _EMPTY_MAP, MappingProxyType,
                     lambda items: FrozenMap(items) if items else _EMPTY_FROZEN_MAP)
"""By _MAPPING_KINDS's codes; an empty immutable one is shared, as most are in memory."""


def _mapping_decoder(keys: Callable, values: Callable) -> Callable[[Any, list], Any]:
    def decode(plain: Any, table: list) -> Any:
        if type(plain) is not list or not plain or len(plain) % 2 != 1:
            raise StateUnusable("not a mapping")
        kind = plain[0]
        if type(kind) is not int or not 0 <= kind < len(_MAPPING_BUILDERS):
            raise StateUnusable(f"not a kind of mapping: {kind!r}")
        it = iter(plain)
        next(it)
        if key_classes is None:
            items = {keys(k, table): values(v, table) for k, v in zip(it, it)}
        else:  # scalar keys (strings, mostly): checked here, one call fewer per entry
            items = {}
            for k, v in zip(it, it):
                if type(k) not in key_classes:
                    raise StateUnusable(f"a {type(k).__name__} key where a {key_classes[0].__name__} is declared")
                items[k] = values(v, table)
        return items if kind == 0 else _MAPPING_BUILDERS[kind](items)
    key_classes = getattr(keys, "classes", None)
    return decode


def _union_decoder(options: tuple[Any, ...], env: Env) -> Callable[[Any, list], Any]:
    others = [option for option in options if option is not NoneType]
    if len(others) == 1:
        only = _decoder(others[0], env)
        return lambda plain, table: None if plain is None else only(plain, table)
    decoders = [_decoder(option, env) for option in others]

    def decode(plain: Any, table: list) -> Any:
        if plain is None:
            return None
        if type(plain) is not list or len(plain) != 2 or type(plain[0]) is not int or not 0 <= plain[0] < len(decoders):
            raise StateUnusable(f"none of {options}")
        return decoders[plain[0]](plain[1], table)
    return decode


def _dataclass_decoder(cls: type, args: tuple, env: Env) -> Callable[[Any, list], Any]:
    compiled: list[Callable] = []

    def decode(plain: Any, table: list) -> Any:
        if not compiled:
            compiled.append(_compiled_dataclass_decoder(cls, args, env))
        return compiled[0](plain, table)
    return decode


def _compiled_dataclass_decoder(cls: type, args: tuple, env: Env) -> Callable[[Any, list], Any]:
    """`obj = cls.__new__(cls); object.__setattr__(obj, name, decode(plain[i]))...`, generated once per
    class, as pickle rebuilt them (frozen dataclasses: as their generated __init__ sets fields)."""
    fields = _field_hints(cls, args, env)
    namespace: dict[str, Any] = {"cls": cls, "new": object.__new__, "setattr": object.__setattr__, "_type": type,
                                 "StateUnusable": StateUnusable, "size": len(fields)}
    lines = []
    for index, (name, hint, inner) in enumerate(fields):
        decode, optional = _decoder(hint, inner), _optional(hint, inner)
        if optional is not None:  # `X | None`: None inline, one call fewer
            namespace[f"d{index}"] = _decoder(optional, inner)
            lines.append(f"    v = plain[{index}]\n"
                         f"    setattr(obj, {name!r}, None if v is None else d{index}(v, table))\n")
            continue
        classes = getattr(decode, "classes", None)
        if classes is not None:  # a scalar: checked inline
            namespace[f"c{index}"] = classes
            lines.append(f"    v = plain[{index}]\n"
                         f"    if _type(v) not in c{index}:\n"
                         f"        raise StateUnusable('{cls.__name__}.{name}: a ' + _type(v).__name__)\n"
                         f"    setattr(obj, {name!r}, v)\n")
        else:
            namespace[f"d{index}"] = decode
            lines.append(f"    setattr(obj, {name!r}, d{index}(plain[{index}], table))\n")
    source = (
        "def decode(plain, table):\n"
        "    if _type(plain) is not list:\n"
        "        if _type(plain) is int:\n"
        "            found = table[plain]\n"
        "            if _type(found) is not cls:\n"
        "                raise StateUnusable(f'a {_type(found).__name__} where a {cls.__name__} is declared')\n"
        "            return found\n"
        f"        raise StateUnusable('not a {cls.__name__}')\n"
        "    if len(plain) != size:\n"
        f"        raise StateUnusable('{cls.__name__} has {{}} fields, not {{}}'.format(size, len(plain)))\n"
        "    obj = new(cls)\n"
        f"{''.join(lines)}"
        "    table.append(obj)\n"
        "    return obj\n")
    exec(source, namespace)
    return namespace["decode"]


def _decode_any(plain: Any, table: list = None) -> Any:
    cls = type(plain)
    if cls is not list:
        if cls in (str, int, float, bool, bytes, NoneType, datetime):
            return plain
        raise StateUnusable(f"a {cls.__name__} where plain data is declared")
    if not plain:
        raise StateUnusable("an untagged list")
    tag = plain[0]
    if tag == _ANY_DICT and type(tag) is int:
        it = iter(plain)
        next(it)
        return {_decode_any(k): _decode_any(v) for k, v in zip(it, it)}
    if tag == _ANY_DATETIME and type(tag) is int:
        return _decode_datetime(plain[1:], table)
    if tag == _ANY_TIMEDELTA and type(tag) is int:
        return timedelta(*_sized(plain[1:], 3))
    build = _ANY_BUILDERS.get(tag) if type(tag) is int else None
    if build is None:
        raise StateUnusable(f"no kind of data {tag!r}")
    return build([_decode_any(v) for v in plain[1:]])


_ANY_BUILDERS = {_ANY_TUPLE: tuple, _ANY_LIST: list, _ANY_SET: set, _ANY_FROZENSET: frozenset}
