"""Names are identifiers; key values are text that becomes a path segment only encoded.

    validate_name("schedule.program.app", "../..")   # InvalidArgument("schedule.program.app", "must match ...")
    key_segment("marketplace", "x/../..")           # "marketplace=x%2F..%2F.."
    decode_segment("x%2F..%2F..")                   # "x/../.."
    relative_parts("outputs[0].files[1].path", "../etc/passwd")   # InvalidArgument: must stay inside

The rule for every NAME that Sluice turns into a stream, a key or a path (namespace, app, program,
dataset, schedule, partition key and consumer names): NAME_PATTERN, a letter or `_`, then up to 127
letters, digits, `_` or `-` (ASCII). No `.` (qualified names join with it), no `/`, no white space.

Key VALUES may hold any text (STRING keys). A path holds a value only through `encode_segment`, as
Hive writes partition directories: the characters Hive escapes (`/ \\ % = : # ? * " ' [ ] { } ^`,
control characters, DEL) become %XX; a segment of dots only (`.`, `..`) has every dot escaped;
other text, unicode included, stays as it is, so Spark's partition discovery reads the value back.
Pure: no I/O; checking that a resolved path lies under its root is the adapters' part.
"""
from __future__ import annotations

import re
from typing import Mapping
from urllib.parse import unquote

from sluice.domain.errors import InvalidArgument

NAME_PATTERN = "[A-Za-z_][A-Za-z0-9_-]{0,127}"
MAX_NAME_LENGTH = 128
_NAME = re.compile(NAME_PATTERN)

_ESCAPED = frozenset('"#%\'*/:=?\\{[]^}') | frozenset(map(chr, range(0x20))) | {"\x7f"}
"""Hive's FileUtils.charToEscape (plus `}`, NUL and the rest of the control characters)."""


def is_name(value: object) -> bool:
    return isinstance(value, str) and _NAME.fullmatch(value) is not None


def validate_name(path: str, value: object) -> str:
    """`value` if it is an identifier, else InvalidArgument naming `path`."""
    if isinstance(value, str) and not value.strip():
        raise InvalidArgument(path, "must not be empty")
    if not is_name(value):
        shown = value if isinstance(value, str) and len(value) <= 200 else f"{str(value)[:200]}..."
        raise InvalidArgument(path, f"must match {NAME_PATTERN}, got {shown!r}")
    return value  # type: ignore[return-value]


def encode_segment(value: str) -> str:
    """`value` as one path segment: never empty, never `.` or `..`, no `/`; decode_segment reverses it."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"a path segment needs non-empty text, got {value!r}")
    if value.strip(".") == "":
        return "%2E" * len(value)
    return "".join(_escape(c) if c in _ESCAPED or "\ud800" <= c <= "\udfff" else c for c in value)


def _escape(char: str) -> str:
    return "".join(f"%{byte:02X}" for byte in char.encode("utf-8", "surrogatepass"))


def decode_segment(segment: str) -> str:
    return unquote(segment, errors="surrogatepass")


def key_segment(name: str, value: str, path: str = "key") -> str:
    """`name=value` as Hive lays out a partition directory; the name must be an identifier."""
    validate_name(f"{path}.{name}" if isinstance(name, str) else path, name)
    if not isinstance(value, str) or not value:
        raise InvalidArgument(f"{path}.{name}", f"must be non-empty text, got {value!r}")
    return f"{name}={encode_segment(value)}"


def key_segments(key: Mapping[str, str], path: str = "key") -> tuple[str, ...]:
    """The directories of a partition under its dataset's base, in the key's order."""
    return tuple(key_segment(name, value, path) for name, value in key.items())


def relative_parts(path: str, value: object) -> tuple[str, ...]:
    """A relative POSIX path from a result file (a manifest entry) as its segments, or InvalidArgument:
    it must be non-empty, relative, without `..`, `.`, empty segments, backslashes or NUL."""
    if not isinstance(value, str) or not value:
        raise InvalidArgument(path, "must be a non-empty relative path")
    parts = tuple(value.split("/"))
    if value.startswith("/") or "\\" in value or "\x00" in value or any(p in ("", ".", "..") for p in parts):
        raise InvalidArgument(path, f"must be a relative path inside its directory (no '..', '.', '//', "
                                    f"leading '/' or '\\\\'), got {value[:200]!r}")
    return parts
