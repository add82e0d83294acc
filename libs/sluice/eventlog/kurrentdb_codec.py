"""Pure translation between the event-log port and KurrentDB, for the adapter in `kurrentdb.py`.

Nothing here does I/O: names, URL options, metadata, ids, expected versions and the plan of one
multi-stream append are plain functions, unit-tested without a server.

Stored layout under a log's `prefix` (see the adapter's docstring for why):
- `<prefix><stream>`              a Sluice stream; KurrentDB stream positions are Sluice versions
- `<prefix>@id-<uuid>`            one `EventIdReserved` event per Sluice event id (uniqueness)
- `<prefix>@checkpoint-<name>`    one `CheckpointSaved` event per save; the last one counts
Sluice stream names must not start with "@" (internal) or "$" (KurrentDB's system streams).
"""
from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Iterable, Mapping, Sequence
from urllib.parse import parse_qsl, urlencode

from kurrentdbclient import NewEvent as KurrentNewEvent
from kurrentdbclient import NewEvents, StreamState
from kurrentdbclient import RecordedEvent as KurrentRecordedEvent
from kurrentdbclient.connection_spec import URI_SCHEMES_ALL

from sluice.eventlog.port import (
    ANY_VERSION,
    NO_STREAM,
    Checkpoint,
    DuplicateEventId,
    NewEvent,
    RecordedEvent,
    StreamAppend,
    check_expected_version,
)
from sluice.runtime.secrets import mask_url

SCHEMES = tuple(URI_SCHEMES_ALL)
"""URL schemes kurrentdbclient accepts (kurrentdb, kdb, EventStoreDB's esdb; each also +discover)."""
PREFIX_OPTION = "streamPrefix"
"""Sluice's own URL option (case-insensitive), removed before the URL reaches kurrentdbclient."""

INTERNAL = "@"
ID_STREAM = INTERNAL + "id-"
CHECKPOINT_STREAM = INTERNAL + "checkpoint-"
ID_RESERVED = "EventIdReserved"
CHECKPOINT_SAVED = "CheckpointSaved"

ESCAPE = "~"
"""Metadata keys: the adapter's own start with "~" + a letter; a user key starting with "~" or "$" (or
empty) is stored with one more "~" in front; keys starting with "$" are the server's ($schema.name...)."""
RECORDED_AT_KEY = ESCAPE + "recorded_at"
ORIGINAL_ID_KEY = ESCAPE + "id"

ID_NAMESPACE = uuid.UUID("5b0c3e52-7c1f-4b8e-9a8e-51e1ce0e1d1b")
"""uuid5 namespace for Sluice event ids that are not canonical UUID strings (KurrentDB needs UUIDs)."""

JSON = "application/json"
BYTES = "application/octet-stream"


# -- URLs and names ------------------------------------------------------------------------------


def parse_url(url: str) -> tuple[str, str]:
    """`kurrentdb://host:2113?tls=false&streamPrefix=prod-` -> (the URL for kurrentdbclient, the prefix)."""
    base, _, query = url.partition("?")
    scheme = base.partition("://")[0]
    if scheme not in SCHEMES or "://" not in base:
        raise ValueError(f"not a KurrentDB URL: {mask_url(url)!r} (schemes: {', '.join(SCHEMES)})")
    kept, prefix = [], ""
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key.lower() == PREFIX_OPTION.lower():
            prefix = value
        else:
            kept.append((key, value))
    validate_prefix(prefix)
    return (f"{base}?{urlencode(kept)}" if kept else base), prefix


def validate_prefix(prefix: str) -> None:
    if prefix.startswith("$"):
        raise ValueError(f"stream prefix {prefix!r}: names starting with '$' are KurrentDB's system streams")


def stream_name(prefix: str, stream: str) -> str:
    """The KurrentDB stream of a Sluice stream."""
    if not stream or stream[0] in (INTERNAL, "$"):
        raise ValueError(f"stream name {stream!r}: must be non-empty and not start with '{INTERNAL}' or '$'"
                         " (internal streams of the KurrentDB adapter and KurrentDB's system streams)")
    return prefix + stream


def id_stream(prefix: str, event_uuid: uuid.UUID) -> str:
    return f"{prefix}{ID_STREAM}{event_uuid}"


def checkpoint_stream(prefix: str, name: str) -> str:
    return f"{prefix}{CHECKPOINT_STREAM}{name}"


def stream_filter(prefix: str, streams: Sequence[str] = ()) -> str:
    """Regex (kurrentdbclient anchors it with ^...$) matching this log's Sluice streams only: not the
    internal "@" streams, not KurrentDB's "$" streams, not other prefixes' streams; with `streams`
    (Sluice stream prefixes), only the streams starting with one of them. One pattern, grouped:
    kurrentdbclient joins several patterns as ^a|b$, which anchors only the first and the last."""
    chosen = "(?:" + "|".join(re.escape(stream) for stream in streams) + ")" if streams else ""
    return re.escape(prefix) + r"(?![@$])" + chosen + r"[\s\S]*"


# -- events ----------------------------------------------------------------------------------------


def kurrent_event_id(event_id: str) -> tuple[uuid.UUID, str | None]:
    """The UUID KurrentDB stores, and the original id when it has to be kept in the metadata."""
    try:
        parsed = uuid.UUID(event_id)
    except ValueError:
        parsed = None
    if parsed is not None and str(parsed) == event_id:
        return parsed, None
    return uuid.uuid5(ID_NAMESPACE, event_id), event_id


def content_type(data: bytes) -> str:
    """JSON when the bytes are a JSON document (readable in KurrentDB's UI), else octet-stream."""
    def reject(constant: str) -> None:
        raise ValueError(constant)

    try:
        json.loads(data.decode("utf-8"), parse_constant=reject)
    except (UnicodeDecodeError, ValueError):
        return BYTES
    return JSON


def _escape_key(key: str) -> str:
    return ESCAPE + key if key == "" or key[0] in (ESCAPE, "$") else key


def encode_metadata(metadata: Mapping[str, str], recorded_at: datetime, original_id: str | None) -> dict[str, str]:
    encoded = {_escape_key(key): value for key, value in metadata.items()}
    encoded[RECORDED_AT_KEY] = recorded_at.isoformat()
    if original_id is not None:
        encoded[ORIGINAL_ID_KEY] = original_id
    return encoded


def decode_metadata(stored: Mapping[str, object]) -> tuple[dict[str, str], dict[str, str]]:
    """Stored metadata -> (the user's metadata, the adapter's own keys). The server's "$" keys are dropped."""
    user: dict[str, str] = {}
    own: dict[str, str] = {}
    for key, value in stored.items():
        if key.startswith("$") or not isinstance(value, str):
            continue
        if key.startswith(ESCAPE):
            rest = key[1:]
            if rest == "" or rest[0] in (ESCAPE, "$"):
                user[rest] = value
            else:
                own[key] = value
        else:
            user[key] = value
    return user, own


def encode_event(event: NewEvent, recorded_at: datetime) -> KurrentNewEvent:
    event_uuid, original_id = kurrent_event_id(event.id)
    data = bytes(event.data)
    metadata = encode_metadata(event.metadata, recorded_at, original_id)
    return KurrentNewEvent(type=event.type, data=data, metadata=json.dumps(metadata).encode(),
                           content_type=content_type(data), id=event_uuid)  # type: ignore[arg-type]


def decode_event(prefix: str, event: KurrentRecordedEvent) -> RecordedEvent:
    try:
        stored = json.loads(event.metadata) if event.metadata else {}
    except ValueError:  # written by another tool: no metadata we can read
        stored = {}
    user, own = decode_metadata(stored if isinstance(stored, dict) else {})
    recorded_at = own.get(RECORDED_AT_KEY)
    return RecordedEvent(
        id=own.get(ORIGINAL_ID_KEY, str(event.id)),
        stream=event.stream_name[len(prefix):],
        version=event.stream_position,
        position=event.commit_position,
        type=event.type,
        data=bytes(event.data),
        metadata=user,
        recorded_at=datetime.fromisoformat(recorded_at) if recorded_at else event.recorded_at,  # type: ignore[arg-type]
    )


def after_position(events: Iterable[KurrentRecordedEvent], after: int) -> list[KurrentRecordedEvent]:
    """Events past `after` (a read from a commit position includes the event there). Fails loudly if
    positions ever stopped increasing: read_all's cursor would then skip events."""
    kept: list[KurrentRecordedEvent] = []
    last = after
    for event in events:
        if event.commit_position <= after:
            continue
        if event.commit_position <= last:
            raise RuntimeError(f"KurrentDB returned commit position {event.commit_position} after {last}")
        last = event.commit_position
        kept.append(event)
    return kept


def checkpoint_event(value: int, event_uuid: uuid.UUID) -> KurrentNewEvent:
    return KurrentNewEvent(type=CHECKPOINT_SAVED, data=json.dumps({"value": value}).encode(), id=event_uuid)


def checkpoint_value(event: KurrentRecordedEvent) -> int:
    return int(json.loads(event.data)["value"])


# -- planning an append ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Part:
    """One stream's share of a batch: its events (a stream named twice is merged, in order: KurrentDB
    refuses a stream twice in one append) and the version it must have before, None for any."""

    stream: str
    events: tuple[NewEvent, ...]
    required: int | None


def merge_appends(appends: Sequence[StreamAppend]) -> list[Part] | None:
    """One part per stream in first-appearance order, or None when the expected versions of a stream
    named several times contradict each other (no stream version could satisfy them all)."""
    parts: dict[str, Part] = {}
    for append in appends:
        if append.expected_version < ANY_VERSION:
            raise ValueError(f"invalid expected version {append.expected_version} for stream {append.stream!r}")
        part = parts.get(append.stream, Part(append.stream, (), None))
        required = part.required
        if append.expected_version != ANY_VERSION:
            wanted = append.expected_version - len(part.events)
            if wanted < NO_STREAM or required not in (None, wanted):
                return None
            required = wanted
        parts[append.stream] = Part(append.stream, part.events + tuple(append.events), required)
    return list(parts.values())


def versions_to_read(parts: Sequence[Part]) -> list[str]:
    """Streams whose version the adapter reads before writing: ANY (to know the version it returns,
    and to send an exact one) and those without events (their expected version is checked by the read)."""
    return [part.stream for part in parts if part.required is None or not part.events]


def plan_bases(parts: Sequence[Part], actual: Mapping[str, int]) -> dict[str, int] | None:
    """Each stream's version before the write; None if a stream without events has the wrong one."""
    bases: dict[str, int] = {}
    for part in parts:
        if part.required is None:
            bases[part.stream] = actual[part.stream]
        elif not part.events and actual[part.stream] != part.required:
            return None
        else:
            bases[part.stream] = part.required
    return bases


def versions_after(appends: Sequence[StreamAppend], bases: Mapping[str, int]) -> list[int]:
    running = dict(bases)
    versions = []
    for append in appends:
        running[append.stream] += len(append.events)
        versions.append(running[append.stream])
    return versions


def check_in_order(appends: Sequence[StreamAppend], actual: Mapping[str, int]) -> None:
    """The port's rule applied to the appends in order, as one transaction would: raises WrongExpectedVersion."""
    running = dict(actual)
    for append in appends:
        check_expected_version(append.stream, append.expected_version, running[append.stream])
        running[append.stream] += len(append.events)


def unique_ids(appends: Sequence[StreamAppend]) -> None:
    seen: set[str] = set()
    for append in appends:
        for event in append.events:
            if event.id in seen:
                raise DuplicateEventId(event.id)
            seen.add(event.id)


def expected_state(version: int) -> int | StreamState:
    return StreamState.NO_STREAM if version == NO_STREAM else version


@dataclass(frozen=True)
class Attempt:
    """One multi-stream append: Sluice parts first, then id reservations, then checkpoints."""

    requests: list[NewEvents]
    reservations: dict[str, str]                  # reservation stream -> the Sluice event id it reserves
    first_reservation: tuple[str, uuid.UUID] | None  # recognises this attempt's own commit afterwards

    @property
    def has_events(self) -> bool:
        return bool(self.reservations)


def build_attempt(prefix: str, parts: Sequence[Part], bases: Mapping[str, int], checkpoints: Sequence[Checkpoint],
                  recorded_at: datetime, new_uuid: Callable[[], uuid.UUID] = uuid.uuid4,
                  checkpoint_versions: Mapping[str, int] | None = None) -> Attempt:
    """`checkpoint_versions`: the version of each checkpoint stream whose value was checked (for a
    checkpoint with `expected`), sent as its expected version; the others are written at ANY."""
    requests = [NewEvents(stream_name(prefix, part.stream), [encode_event(e, recorded_at) for e in part.events],
                          expected_state(bases[part.stream]))
                for part in parts if part.events]
    reservations: dict[str, str] = {}
    first: tuple[str, uuid.UUID] | None = None
    for part in parts:
        for event in part.events:
            stream = id_stream(prefix, kurrent_event_id(event.id)[0])
            reservation = KurrentNewEvent(type=ID_RESERVED, data=json.dumps({"stream": part.stream}).encode(),
                                          id=new_uuid())  # fresh per attempt: never mistaken for a retry
            requests.append(NewEvents(stream, [reservation], StreamState.NO_STREAM))
            reservations[stream] = event.id
            first = first or (stream, reservation.id)
    latest = {checkpoint.name: checkpoint.value for checkpoint in checkpoints}  # the last value of a name wins
    checked = checkpoint_versions or {}
    requests += [NewEvents(checkpoint_stream(prefix, name), [checkpoint_event(value, new_uuid())],
                           expected_state(checked[name]) if name in checked else StreamState.ANY)
                 for name, value in latest.items()]
    return Attempt(requests, reservations, first)
