"""Object-store events to partition notifications: pure parsing, no I/O.

    routes = parse_routes(tomllib.loads(text))          # or [parse_route(options)] from --route
    for outcome in parse_message(kafka_value, routes):  # Announce | Refuse | Ignore, one per record
        ...

The input is the S3 event notification JSON (MinIO emits the same shape): `Records[]` with
`eventName` (`ObjectCreated:Put`, MinIO `s3:ObjectCreated:Put`), `eventTime`, `s3.bucket.name`,
`s3.object.key` (URL-encoded: AWS keeps `/`, MinIO encodes it too; `+` is a space), `s3.object.size`,
`s3.object.sequencer`, `s3.object.eTag`, `s3.object.versionId`.

A route maps a bucket and key prefix to one dataset:

    [[route]]
    bucket = "raw"
    prefix = "clickstream/"
    pattern = "marketplace={marketplace}/date={date}/hour={hour}/_SUCCESS"
    namespace = "clickstream"
    dataset = "events"

The pattern's segments (split on `/`) match the key's segments after the prefix one for one. A
segment is literal text, or text with one `{name}` placeholder whose match is the partition key
value `name` (non-empty; `marketplace={marketplace}` is a Hive-style `k=v` directory). The last
segment names the object: a literal (a marker such as `_SUCCESS`: only it announces the partition;
other objects of a matching directory are ignored) or `*` (every object announces it). The
partition's keys are the placeholders in pattern order, its location the object's directory as
`s3://BUCKET/DIR` (no trailing `/`), its size the event's object size. The first route whose
bucket, prefix and directory segments match wins.

Nothing from the event becomes a path unchecked. A key value is 1 to 255 characters, each a unicode
letter or digit or one of `-_.~+@,`, not dots only, in NFC; so `..`, `/`, `%`-encoded text (what
is left encoded after the event's one URL decoding), control and format characters (right-to-left
overrides, zero-width joiners), look-alike slashes and white space are refused. Every segment is
non-empty, not `.` or `..`, without `%`, `\\` or control characters; a key is at most 1,024 bytes
(S3's limit). Refused records go to the dead-letter topic with the reason.

The notification id is derived from (bucket, key, sequencer), or (bucket, key, eTag, versionId)
when an event carries no sequencer: a redelivered event gets the same id and Sluice ignores it.
"""
from __future__ import annotations

import json
import re
import shlex
import unicodedata
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable, Mapping
from urllib.parse import unquote_plus

from sluice.domain.common import Notification, PartitionCommitted, PartitionRef
from sluice.domain.names import is_name
from sluice.ids import derived_id

MAX_MESSAGE_BYTES = 1024 * 1024
MAX_RECORDS = 100
MAX_KEY_BYTES = 1024
MAX_VALUE_CHARS = 255
MAX_SIZE_BYTES = 2**62
VALUE_PUNCTUATION = frozenset("-_.~+@,")
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
WILDCARD = "*"


class MappingError(ValueError):
    """The mapping configuration is wrong: the message names the route and the field."""


@dataclass(frozen=True, slots=True)
class Segment:
    """Literal `before`, then (when `name`) a captured value, then literal `after`."""

    before: str
    name: str | None = None
    after: str = ""

    def match(self, text: str) -> str | None:
        """The captured value ("" for a literal segment) if `text` matches, else None."""
        if self.name is None:
            return "" if text == self.before else None
        if len(text) <= len(self.before) + len(self.after):
            return None
        if not (text.startswith(self.before) and text.endswith(self.after)):
            return None
        return text[len(self.before):len(text) - len(self.after)]


@dataclass(frozen=True, slots=True)
class Route:
    bucket: str
    prefix: str
    directories: tuple[Segment, ...]
    marker: str
    """The object name that announces the partition, or `*`: every object does."""
    namespace: str
    dataset: str

    def describe(self) -> str:
        return f"s3://{self.bucket}/{self.prefix} -> {self.namespace}.{self.dataset}"


@dataclass(frozen=True, slots=True)
class Announce:
    """A record that becomes a partition notification."""

    notification: Notification
    source: str
    """s3://bucket/key of the object, for logs."""
    record: int


@dataclass(frozen=True, slots=True)
class Refuse:
    """A record (or a whole message: record None) that goes to the dead-letter topic."""

    reason: str
    record: int | None = None


@dataclass(frozen=True, slots=True)
class Ignore:
    """A record that is no partition's announcement: not a creation, or not the route's marker."""

    reason: str
    record: int | None = None


Outcome = Announce | Refuse | Ignore


# -- configuration ----------------------------------------------------------------------------------


ROUTE_FIELDS = ("bucket", "prefix", "pattern", "namespace", "dataset")


def parse_routes(document: Mapping[str, Any]) -> tuple[Route, ...]:
    """The `[[route]]` tables of a parsed TOML document."""
    unknown = sorted(set(document) - {"route"})
    if unknown:
        raise MappingError(f"unknown top-level key(s) {unknown}: expected [[route]] tables")
    tables = document.get("route")
    if not isinstance(tables, list) or not tables:
        raise MappingError("no routes: expected at least one [[route]] table")
    return tuple(parse_route(table, f"route[{index}]") for index, table in enumerate(tables))


def parse_route_option(text: str) -> Route:
    """`--route 'bucket=raw prefix=clickstream/ pattern="a={a}/_SUCCESS" dataset=clickstream.events'`."""
    options: dict[str, str] = {}
    for word in shlex.split(text):
        name, equals, value = word.partition("=")
        if not equals:
            raise MappingError(f"--route {text!r}: expected NAME=VALUE words, got {word!r}")
        if name in options:
            raise MappingError(f"--route {text!r}: {name} given twice")
        options[name] = value
    if "dataset" in options and "namespace" not in options:
        namespace, dot, dataset = options["dataset"].partition(".")
        if dot:
            options["namespace"], options["dataset"] = namespace, dataset
    return parse_route(options, f"--route {text!r}")


def parse_route(table: Mapping[str, Any], where: str = "route") -> Route:
    if not isinstance(table, Mapping):
        raise MappingError(f"{where}: expected a table")
    unknown = sorted(set(table) - set(ROUTE_FIELDS))
    if unknown:
        raise MappingError(f"{where}: unknown key(s) {unknown}; expected {list(ROUTE_FIELDS)}")
    values = {name: table.get(name, "") for name in ROUTE_FIELDS}
    for name, value in values.items():
        if not isinstance(value, str):
            raise MappingError(f"{where}.{name}: expected a string, got {type(value).__name__}")
    bucket, prefix, pattern = values["bucket"], values["prefix"], values["pattern"]
    if not _BUCKET.fullmatch(bucket) or ".." in bucket:
        raise MappingError(f"{where}.bucket: must be an S3 bucket name (3-63 of a-z 0-9 . -), got {bucket!r}")
    for name in ("namespace", "dataset"):
        if not is_name(values[name]):
            raise MappingError(f"{where}.{name}: must be an identifier (a letter or _, then letters, digits, _ "
                               f"or -), got {values[name]!r}")
    if prefix and not prefix.endswith("/"):
        raise MappingError(f"{where}.prefix: must be empty or end with '/', got {prefix!r}")
    for segment in prefix.split("/")[:-1]:
        if segment_problem(segment) or not is_safe_value(segment):
            raise MappingError(f"{where}.prefix: segment {segment!r} is not plain text")
    if not pattern:
        raise MappingError(f"{where}.pattern: required, e.g. 'date={{date}}/hour={{hour}}/_SUCCESS'")
    *directories, marker = pattern.split("/")
    parsed = tuple(_parse_segment(text, f"{where}.pattern") for text in directories)
    names = [segment.name for segment in parsed if segment.name]
    if not names:
        raise MappingError(f"{where}.pattern: needs at least one {{name}} in a directory segment, got {pattern!r}")
    if len(set(names)) != len(names):
        raise MappingError(f"{where}.pattern: a key name appears twice in {pattern!r}")
    if marker != WILDCARD and (_PLACEHOLDER.search(marker) or "{" in marker or "}" in marker
                               or segment_problem(marker)):
        raise MappingError(f"{where}.pattern: the last segment must be a marker object's name (e.g. _SUCCESS) "
                           f"or '*', got {marker!r}")
    return Route(bucket, prefix, parsed, marker, values["namespace"], values["dataset"])


def _parse_segment(text: str, where: str) -> Segment:
    if text == WILDCARD:
        raise MappingError(f"{where}: '*' is only for the last segment (the object's name)")
    placeholders = _PLACEHOLDER.findall(text)
    if len(placeholders) > 1:
        raise MappingError(f"{where}: at most one {{name}} per segment, got {text!r}")
    if not placeholders:
        if "{" in text or "}" in text or segment_problem(text):
            raise MappingError(f"{where}: segment {text!r} is not plain text")
        return Segment(text)
    name = placeholders[0]
    if not is_name(name):
        raise MappingError(f"{where}: key name {name!r} must be an identifier")
    before, _, after = text.partition("{" + name + "}")
    for literal in (before, after):
        if "{" in literal or "}" in literal or (literal and segment_problem(literal)):
            raise MappingError(f"{where}: segment {text!r} is not plain text around its {{name}}")
    return Segment(before, name, after)


# -- checks -------------------------------------------------------------------------------------------


def segment_problem(segment: str) -> str | None:
    """Why a key segment cannot be part of a location, or None."""
    if not segment:
        return "an empty segment ('//', a leading or trailing '/')"
    if segment.strip(".") == "":
        return f"a dots-only segment {_shown(segment)}"
    if "%" in segment:
        return f"a percent-encoded segment {_shown(segment)} (encoded twice?)"
    if "\\" in segment:
        return f"a backslash in {_shown(segment)}"
    if any(unicodedata.category(char)[0] == "C" for char in segment):
        return f"a control, format or unassigned character in {_shown(segment)}"
    return None


def value_problem(value: str) -> str | None:
    """Why a captured text cannot be a key value (and a directory of the location), or None."""
    if not 0 < len(value) <= MAX_VALUE_CHARS:
        return f"must be 1 to {MAX_VALUE_CHARS} characters, got {len(value)}"
    if value.strip(".") == "":
        return "is dots only"
    if not all(char.isalnum() or char in VALUE_PUNCTUATION for char in value):
        return f"may hold only letters, digits and {''.join(sorted(VALUE_PUNCTUATION))}"
    if not unicodedata.is_normalized("NFC", value):
        return "is not in unicode normal form C"
    return None


def is_safe_value(value: str) -> bool:
    return value_problem(value) is None


def _shown(text: str, limit: int = 80) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


# -- events -------------------------------------------------------------------------------------------


def parse_message(value: bytes | None, routes: Iterable[Route]) -> list[Outcome]:
    """What each record of one Kafka message becomes; never raises for any input."""
    if value is None or not value:
        return [Refuse("malformed: an empty message")]
    if len(value) > MAX_MESSAGE_BYTES:
        return [Refuse(f"oversized: {len(value)} bytes > {MAX_MESSAGE_BYTES}")]
    try:
        document = json.loads(value)
    except (ValueError, RecursionError) as error:  # UnicodeDecodeError is a ValueError
        return [Refuse(f"malformed: not JSON ({str(error)[:120]})")]
    if not isinstance(document, dict):
        return [Refuse(f"malformed: expected a JSON object, got {type(document).__name__}")]
    if "Records" not in document:
        if document.get("Event") == "s3:TestEvent":
            return [Ignore("s3:TestEvent")]
        return [Refuse("malformed: no Records")]
    records = document["Records"]
    if not isinstance(records, list) or not records:
        return [Refuse("malformed: Records must be a non-empty list")]
    if len(records) > MAX_RECORDS:
        return [Refuse(f"oversized: {len(records)} records > {MAX_RECORDS}")]
    routes = tuple(routes)
    outcomes: list[Outcome] = []
    for index, record in enumerate(records):
        try:
            outcomes.append(parse_record(record, routes, index))
        except _Refused as refused:
            outcomes.append(Refuse(str(refused), index))
    return outcomes


class _Refused(Exception):
    pass


def parse_record(record: Any, routes: tuple[Route, ...], index: int = 0) -> Announce | Ignore:
    """An Announce or Ignore; _Refused with the reason (parse_message turns it into a Refuse)."""
    if not isinstance(record, dict):
        raise _Refused(f"malformed: Records[{index}] is not an object")
    event_name = _text(record, ("eventName",), index)
    if not event_name.removeprefix("s3:").startswith("ObjectCreated:"):
        return Ignore(f"{_shown(event_name)} is not an object creation", index)
    s3 = record.get("s3")
    if not isinstance(s3, dict):
        raise _Refused(f"malformed: Records[{index}].s3 is not an object")
    bucket = _text(s3, ("bucket", "name"), index)
    raw_key = _text(s3, ("object", "key"), index)
    if len(raw_key) > 3 * MAX_KEY_BYTES:
        raise _Refused(f"refused: Records[{index}].s3.object.key is longer than {MAX_KEY_BYTES} bytes")
    try:
        key = unquote_plus(raw_key, errors="strict")
    except UnicodeDecodeError:
        raise _Refused(f"refused: Records[{index}].s3.object.key {_shown(raw_key)} is not URL-encoded UTF-8") from None
    if len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        raise _Refused(f"refused: Records[{index}].s3.object.key is longer than {MAX_KEY_BYTES} bytes")
    source = f"s3://{bucket}/{key}"
    for segment in key.split("/"):
        if problem := segment_problem(segment):
            raise _Refused(f"refused: key {_shown(key)}: {problem}")
    announced = _route(routes, bucket, key, index)
    if isinstance(announced, Ignore):
        return announced
    route, values, directory = announced
    obj = s3.get("object")
    size = obj.get("size", 0)
    if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= MAX_SIZE_BYTES:
        raise _Refused(f"malformed: Records[{index}].s3.object.size must be an integer from 0 to {MAX_SIZE_BYTES}")
    time = _event_time(record, index)
    partition = PartitionRef(values, f"s3://{bucket}/{directory}", size,
                             metadata=_metadata(obj, source, event_name))
    notification = Notification(notification_id(bucket, key, obj, index), time,
                                PartitionCommitted(route.namespace, route.dataset, (partition,)))
    return Announce(notification, source, index)


def _route(routes: tuple[Route, ...], bucket: str, key: str,
           index: int) -> tuple[Route, dict[str, str], str] | Ignore:
    """The first route matching the key's directory, its key values and the directory; Ignore when the
    directory matches but the object is not the marker; _Refused when no route matches."""
    for route in routes:
        if bucket != route.bucket or not key.startswith(route.prefix):
            continue
        *directories, name = key[len(route.prefix):].split("/")
        if len(directories) != len(route.directories):
            continue
        values: dict[str, str] = {}
        for segment, text in zip(route.directories, directories):
            captured = segment.match(text)
            if captured is None:
                break
            if segment.name is not None:
                if problem := value_problem(captured):
                    raise _Refused(f"refused: key {_shown(key)}: the value {_shown(captured)} of {segment.name} "
                                   f"{problem}")
                values[segment.name] = captured
        else:
            if route.marker != WILDCARD and name != route.marker:
                return Ignore(f"{_shown(name)} is not the marker {route.marker!r} of {route.describe()}", index)
            return route, values, route.prefix + "/".join(directories)
    raise _Refused(f"no route: s3://{bucket}/{_shown(key)[1:-1]} matches no route's bucket, prefix and pattern")


def notification_id(bucket: str, key: str, obj: Mapping[str, Any], index: int = 0) -> str:
    """Stable per event: a redelivery has the same id, a new write of the object a new sequencer."""
    sequencer, etag, version = (obj.get(name) for name in ("sequencer", "eTag", "versionId"))
    for name, value in (("sequencer", sequencer), ("eTag", etag), ("versionId", version)):
        if value is not None and (not isinstance(value, str) or len(value) > 1024):
            raise _Refused(f"malformed: Records[{index}].s3.object.{name} must be a string of at most 1024 characters")
    if sequencer:
        identity = [bucket, key, "sequencer", sequencer]
    elif etag:
        identity = [bucket, key, "eTag", etag, version or ""]
    else:
        raise _Refused(f"malformed: Records[{index}].s3.object has neither sequencer nor eTag: a redelivery "
                       "could not be recognised")
    return derived_id("ingest-s3", json.dumps(identity, ensure_ascii=True))


def _metadata(obj: Mapping[str, Any], source: str, event_name: str) -> dict[str, str]:
    metadata = {"source": source, "event": event_name}
    if isinstance(obj.get("eTag"), str) and obj["eTag"]:
        metadata["etag"] = obj["eTag"]
    return metadata


def _event_time(record: Mapping[str, Any], index: int) -> datetime:
    text = _text(record, ("eventTime",), index)
    try:
        time = datetime.fromisoformat(text)
    except ValueError:
        raise _Refused(f"malformed: Records[{index}].eventTime {_shown(text)} is not an ISO 8601 time") from None
    if time.tzinfo is None:
        raise _Refused(f"malformed: Records[{index}].eventTime {_shown(text)} has no time zone")
    return time


def _text(document: Mapping[str, Any], path: tuple[str, ...], index: int) -> str:
    value: Any = document
    for name in path:
        value = value.get(name) if isinstance(value, dict) else None
    if not isinstance(value, str) or not value:
        where = ".".join(path) if path[0] != "bucket" and path[0] != "object" else "s3." + ".".join(path)
        raise _Refused(f"malformed: Records[{index}].{where} must be a non-empty string")
    return value
