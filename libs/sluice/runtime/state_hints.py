"""What the state codec (sluice.runtime.state_codec) reads from type hints, and the codes its
encoding and decoding share."""
from __future__ import annotations

import dataclasses
import typing
from types import MappingProxyType, NoneType, UnionType
from typing import Any

import immutables

from sluice.domain.triggers.specs import FrozenMap


class StateUnusable(Exception):
    """Plain data that is not a value of the declared type."""


Env = tuple  # ((TypeVar, hint), ...): what a generic dataclass's parameters stand for


def resolve(hint: Any, env: Env) -> Any:
    if isinstance(hint, typing.TypeVar):
        for var, value in env:
            if var is hint:
                return value
        return Any
    if type(hint) is typing.NewType:
        return hint.__supertype__
    return hint


SCALARS = (str, int, float, bool, bytes, NoneType)


def union_options(hint: Any) -> tuple[Any, ...] | None:
    if typing.get_origin(hint) in (typing.Union, UnionType):
        return typing.get_args(hint)
    return None


def optional_of(hint: Any, env: Env) -> Any:
    """X for a hint `X | None` (X not itself a union), else None."""
    options = union_options(resolve(hint, env))
    if options is None or NoneType not in options or len(options) != 2:
        return None
    return next(option for option in options if option is not NoneType)


def field_hints(cls: type, args: tuple, env: Env) -> list[tuple[str, Any, Env]]:
    inner = tuple(zip(getattr(cls, "__parameters__", ()), [resolve(a, env) for a in args]))
    hints = typing.get_type_hints(cls)
    return [(f.name, hints.get(f.name, Any), inner) for f in dataclasses.fields(cls)]



MAPPING_KINDS = {dict: 0, immutables.Map: 1, MappingProxyType: 2, FrozenMap: 3}
"""The mappings a snapshot holds, by a code that never changes (a new kind takes a new code)."""


ANY_TUPLE, ANY_LIST, ANY_SET, ANY_FROZENSET, ANY_DICT, ANY_DATETIME, ANY_TIMEDELTA = range(7)
