"""Domain events <-> event-log records: frozen dataclasses as JSON, decoded by their type hints."""
from __future__ import annotations

import base64
import dataclasses
import enum
import json
import operator
import typing
from datetime import datetime
from functools import cache
from types import NoneType, UnionType
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Iterable

import orjson

from sluice.eventlog.port import NewEvent, RecordedEvent


class EventTypes:
    """A registry of the event classes a service reads back from its streams."""

    def __init__(self, classes: Iterable[type]) -> None:
        self._by_name = {cls.__name__: cls for cls in classes}

    def __contains__(self, type_name: str) -> bool:
        return type_name in self._by_name

    def decode(self, recorded: RecordedEvent) -> Any:
        """The event; UndecodableEvent when this release cannot read it (of a type it does not know,
        corrupt, cut short, or written by another release)."""
        try:
            cls = self._by_name[recorded.type]
            encoded = _recently_encoded.get(recorded.id)
            if encoded is not None and encoded[0] == recorded.data and type(encoded[1]) is cls:
                return encoded[1]
            return from_jsonable(cls, json.loads(recorded.data))  # not orjson: it reads an integer beyond 64 bits as a float
        except DECODING_ERRORS as error:
            raise UndecodableEvent(recorded, error if recorded.type in self._by_name
                                   else "a type this release does not know") from error


DECODING_ERRORS = (ValueError, TypeError, KeyError, AttributeError, RecursionError)
"""What decoding an unreadable event raises: JSON that is not, a field missing or of another type, JSON nested
too deeply."""


class UndecodableEvent(ValueError):
    """An event this release cannot read, named: "stream S version V at position P: TYPE: why"."""

    WHAT = "the event log holds an event this release cannot read"
    """How a command or a server's answer introduces one."""
    MAX_REASON = 300
    """A union's decoder quotes the whole value it could not place: a line must stay readable."""

    def __init__(self, recorded: RecordedEvent, cause: BaseException | str) -> None:
        reason = " ".join((cause if isinstance(cause, str) else f"{type(cause).__name__}: {cause}").split())
        if len(reason) > self.MAX_REASON:
            reason = f"{reason[:self.MAX_REASON]}…(+{len(reason) - self.MAX_REASON} characters)"
        super().__init__(f"stream {recorded.stream} version {recorded.version} at position {recorded.position}: "
                         f"{recorded.type}: {reason}")


_JSON = json.JSONEncoder(separators=(",", ":"))
"""One encoder for every event: json.dumps with arguments builds a new one per call."""


_recently_encoded: OrderedDict[str, tuple[bytes, Any]] = OrderedDict()
"""event id -> (data, event) of the last events this process encoded: its relays and read models decode
them right after they commit. The data is compared, not just the id: a writer that lost a conflict
encoded another event under the id the winner committed. Few: the readers follow the appends closely,
and a fired job's event holds the whole job (~3 KB in memory)."""
_RECENTLY_ENCODED_MAX = 64
_RECENTLY_ENCODED_BYTES = 16 * 1024
"""A larger event is not kept: one of many jobs (the checker's JobsAdmitted of a burst, ~1.5 MB in memory for
500) would make the 64 kept hold ~100 MB."""


def encode(event: Any, event_id: str, metadata: Mapping[str, str] | None = None) -> NewEvent:
    data = dumps(event)
    if len(data) <= _RECENTLY_ENCODED_BYTES:
        _recently_encoded[event_id] = (data, event)
        if len(_recently_encoded) > _RECENTLY_ENCODED_MAX:
            _recently_encoded.popitem(last=False)
    return NewEvent(id=event_id, type=type(event).__name__, data=data, metadata=dict(metadata) if metadata else {})


def dumps(event: Any) -> bytes:
    """The event as JSON: orjson writes dataclasses, enums, tuples and datetimes (isoformat) as
    `to_jsonable` + json do, several times faster; what it refuses (a mapping with keys that are not
    strings, an integer beyond 64 bits) takes that slower path."""
    try:
        # copied: orjson's bytes keep a 4 KB buffer whatever their length, and the SQLite log's tail
        # holds thousands of them
        return bytes(memoryview(orjson.dumps(event, default=_orjson_default)))
    except TypeError:
        return _JSON.encode(to_jsonable(event)).encode()


def _orjson_default(value: Any) -> Any:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode()
    raise TypeError(f"not JSON-able: {type(value).__name__}")


def to_jsonable(value: Any) -> Any:
    return _converter(type(value))(value)


_AS_IS = frozenset({NoneType, str, int, float, bool})


@cache
def _converter(cls: type) -> typing.Callable[[Any], Any]:
    """How to make a value of `cls` JSON-able (what `dumps` writes), worked out once per class."""
    if cls in (NoneType, str, int, float, bool):
        return _same
    if dataclasses.is_dataclass(cls):
        names = tuple(f.name for f in dataclasses.fields(cls))
        values = operator.attrgetter(*names) if len(names) > 1 else lambda value: (getattr(value, names[0]),)

        def dataclass_value(value: Any) -> dict[str, Any]:
            return {name: field if type(field) in _AS_IS else _converter(type(field))(field)
                    for name, field in zip(names, values(value))}
        return dataclass_value
    if issubclass(cls, enum.Enum):
        return lambda value: value.value
    if issubclass(cls, datetime):
        return datetime.isoformat
    if issubclass(cls, (bytes, bytearray)):
        return lambda value: base64.b64encode(value).decode()
    if issubclass(cls, Mapping):
        return lambda value: {str(k): _converter(type(v))(v) for k, v in value.items()}
    if issubclass(cls, (list, tuple)):
        return lambda value: [_converter(type(v))(v) for v in value]
    return _same


def _same(value: Any) -> Any:
    return value


def from_jsonable(hint: Any, value: Any) -> Any:
    return _decoder(hint)(value)


@cache
def _decoder(hint: Any) -> typing.Callable[[Any], Any]:
    """How to rebuild a value of type `hint` from JSON, worked out once per type hint: the
    decoders of a dataclass's fields are looked up at its first value (a hint may refer to
    itself, as a trigger's children do), never again per value."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, UnionType):
        options = [a for a in typing.get_args(hint) if a is not NoneType]
        return _none_passes(_union_decoder(tuple(options)))
    if dataclasses.is_dataclass(hint):
        return _none_passes(_dataclass_decoder(hint))
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _none_passes(hint)
    if hint is datetime:
        return _none_passes(datetime.fromisoformat)
    if hint is bytes:
        return _none_passes(base64.b64decode)
    if origin is tuple:
        args = typing.get_args(hint)
        item = _decoder(args[0]) if args else _same
        return _none_passes(lambda value: tuple(map(item, value)))
    if origin in (dict, Mapping) or hint in (dict, Mapping):
        args = typing.get_args(hint)
        item = _decoder(args[1]) if args else _same
        if item is _same:
            return _none_passes(dict)
        return _none_passes(lambda value: {k: item(v) for k, v in value.items()})
    return _same


def _dataclass_decoder(cls: type) -> typing.Callable[[dict], Any]:
    compiled: list[typing.Callable[[dict], Any]] = []

    def dataclass_value(value: dict) -> Any:
        if not compiled:
            compiled.append(_compiled_dataclass_decoder(cls))
        return compiled[0](value)
    return dataclass_value


def _compiled_dataclass_decoder(cls: type) -> typing.Callable[[dict], Any]:
    """A function made for `cls`, `cls(name=decode(value["name"]), ...)`: generated code, as
    attrs and cattrs do, because a generic loop over the fields is the decoder's cost. A value
    without some field (written before that field was added) takes the generic path."""
    fields = [(name, _decoder(hint)) for name, hint in _field_hints(cls).items()]
    namespace: dict[str, Any] = {"cls": cls}
    arguments = []
    for index, (name, decode) in enumerate(fields):
        if decode is _same:
            arguments.append(f"{name}=value[{name!r}]")
        else:
            namespace[f"decode_{index}"] = decode
            arguments.append(f"{name}=decode_{index}(value[{name!r}])")
    exec(f"def decode_all(value):\n    return cls({', '.join(arguments)})", namespace)
    decode_all = namespace["decode_all"]

    def decode(value: dict) -> Any:
        if len(value) == len(fields):
            try:
                return decode_all(value)
            except KeyError:
                pass
        return cls(**{name: field_decode(value[name]) for name, field_decode in fields if name in value})
    return decode


def _none_passes(decode: typing.Callable[[Any], Any]) -> typing.Callable[[Any], Any]:
    if decode is _same:
        return _same
    return lambda value: None if value is None else decode(value)


def _union_decoder(options: tuple[Any, ...]) -> typing.Callable[[Any], Any]:
    if len(options) == 1:
        return _decoder(options[0])
    return lambda value: _from_union(options, value)


def _from_union(options: tuple[Any, ...], value: Any) -> Any:
    # Unions of dataclasses are told apart by their fields' names: an exact match wins; else the one
    # option whose required fields are all present and that knows every key (an event written
    # before a field with a default was added).
    if isinstance(value, dict):
        keys = frozenset(value)
        chosen = _union_member(options, keys)
        if chosen is not None:
            return _decoder(chosen)(value)
    raise ValueError(f"cannot decode {value!r} as any of {list(options)}")


@cache
def _union_member(options: tuple[Any, ...], keys: frozenset[str]) -> Any:
    classes = [o for o in options if dataclasses.is_dataclass(o)]
    exact = [o for o in classes if keys == set(_field_hints(o))]
    compatible = exact or [o for o in classes if _required_fields(o) <= keys <= set(_field_hints(o))]
    return compatible[0] if len(compatible) == 1 else None


@cache
def _required_fields(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls)
                     if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)


@cache
def _field_hints(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}
