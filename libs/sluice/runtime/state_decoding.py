"""Plain data from msgpack -> state, building only the declared types (see sluice.runtime.state_codec)."""
from __future__ import annotations

import dataclasses
import enum
import typing
from collections.abc import Mapping
from datetime import date, datetime, timedelta, timezone
from types import MappingProxyType, NoneType
from typing import Any, Callable
from zoneinfo import ZoneInfo

import immutables

from sluice.domain.triggers.specs import FrozenMap
from sluice.runtime.state_hints import (ANY_DATETIME, ANY_DICT, ANY_FROZENSET, ANY_LIST, ANY_SET, ANY_TIMEDELTA,
                                        ANY_TUPLE, Env, StateUnusable, field_hints, optional_of, resolve,
                                        union_options)

_decoders: dict[tuple[Any, Env], Callable[[Any, list], Any]] = {}


def decoder(hint: Any, env: Env) -> Callable[[Any, list], Any]:
    hint = resolve(hint, env)
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
    options = union_options(hint)
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
        keys, values = (decoder(args[0], env), decoder(args[1], env)) if args else (_decode_any, _decode_any)
        return _mapping_decoder(keys, values)
    if origin in (tuple, list, set, frozenset):
        if origin is tuple and not args:
            return _decode_any
        if origin is tuple and (len(args) != 2 or args[1] is not Ellipsis):
            items = [decoder(arg, env) for arg in args]
            return lambda plain, table: tuple([item(v, table) for item, v in zip(items, _sized(plain, len(items)))])
        item = decoder(args[0], env) if args else _decode_any
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
"""By MAPPING_KINDS's codes; an empty immutable one is shared, as most are in memory."""


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
        only = decoder(others[0], env)
        return lambda plain, table: None if plain is None else only(plain, table)
    decoders = [decoder(option, env) for option in others]

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
    fields = field_hints(cls, args, env)
    namespace: dict[str, Any] = {"cls": cls, "new": object.__new__, "setattr": object.__setattr__, "_type": type,
                                 "StateUnusable": StateUnusable, "size": len(fields)}
    lines = []
    for index, (name, hint, inner) in enumerate(fields):
        decode, optional = decoder(hint, inner), optional_of(hint, inner)
        if optional is not None:  # `X | None`: None inline, one call fewer
            namespace[f"d{index}"] = decoder(optional, inner)
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


_PLAIN = frozenset({str, int, float, bool, bytes, NoneType, datetime})


def _decode_any(plain: Any, table: list = None) -> Any:
    cls = type(plain)
    if cls is not list:
        if cls in _PLAIN:
            return plain
        raise StateUnusable(f"a {cls.__name__} where plain data is declared")
    if not plain:
        raise StateUnusable("an untagged list")
    tag = plain[0]
    if type(tag) is int and 0 <= tag <= ANY_FROZENSET:  # a tuple, list or set: of scalars only, mostly
        items = plain[1:]
        for item in items:
            if type(item) not in _PLAIN:
                return _ANY_BUILDERS[tag]([_decode_any(v) for v in items])
        return _ANY_BUILDERS[tag](items) if tag != ANY_LIST else items
    if tag == ANY_DICT and type(tag) is int:
        it = iter(plain)
        next(it)
        return {_decode_any(k): _decode_any(v) for k, v in zip(it, it)}
    if tag == ANY_DATETIME and type(tag) is int:
        return _decode_datetime(plain[1:], table)
    if tag == ANY_TIMEDELTA and type(tag) is int:
        return timedelta(*_sized(plain[1:], 3))
    build = _ANY_BUILDERS.get(tag) if type(tag) is int else None
    if build is None:
        raise StateUnusable(f"no kind of data {tag!r}")
    return build([_decode_any(v) for v in plain[1:]])


_ANY_BUILDERS = {ANY_TUPLE: tuple, ANY_LIST: list, ANY_SET: set, ANY_FROZENSET: frozenset}
