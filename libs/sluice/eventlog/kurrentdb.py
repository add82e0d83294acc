"""KurrentDB / EventStoreDB adapter of the event-log port (kurrentdbclient; server 25.1 or later).

Mapping. A Sluice stream is a KurrentDB stream (`<prefix><stream>`); Sluice versions are KurrentDB
stream positions (0-based, gapless). Positions are KurrentDB commit positions: one per event,
increasing in commit order, but NOT contiguous (they are offsets in the server's log), so nothing
may compute with them beyond comparing. KurrentDB appends to one log through a single writer and
serves reads of a prefix of it, so `read_all(after=P)` never skips a late commit (what the
PostgreSQL adapter needs a lock for); tests/integration/eventlog/test_kurrentdb.py checks this on a
live server. `prefix` (URL option `streamPrefix`) lets several logs share a server: read_all,
head_position and subscribe only see this prefix's Sluice streams. Prefixes are plain string
prefixes, so on one server none may start another (`prod-` and `prod-eu-` overlap), and a log
without a prefix sees every stream that is not KurrentDB's ("$") nor internal ("@").

Atomicity. Every write is ONE multi-stream append (KurrentDB 25.1's MultiStreamAppend: all or
nothing) carrying, besides the events:
- per event, a reservation event in `<prefix>@id-<uuid>` expected NO_STREAM. KurrentDB neither
  indexes event ids nor refuses a known id (it treats one as an idempotent retry in the same
  stream and accepts it in another), so this is what makes an id unique in the log: a second use
  fails the whole append, and the adapter raises DuplicateEventId. It costs one small event per
  event, and counts towards the server's limit on the size of one append.
- per checkpoint, an event in `<prefix>@checkpoint-<name>` (expected ANY); read_checkpoint reads
  the last one. Checkpoints are thereby stored atomically with the events they go with.
Both kinds live in "@" streams, which read_all, head_position and subscribe filter out.

Expected versions. Exact versions and NO_STREAM go to the server as they are. ANY is replaced by
the stream's version read just before (so the adapter can return the new version, which the
server's reply does not carry through kurrentdbclient) and the append is retried if another writer
got in between. A stream without events in a batch cannot be sent: its expected version is
checked by that read, a moment before the write rather than inside it (Sluice has one writer per
stream, so nothing can slip in there in practice).

Failures. A rejected append is explained with reads: the versions in order (WrongExpectedVersion
wins, as in the other adapters), then the reservation the server named (DuplicateEventId). If the
first reservation turns out to be this attempt's own, the append had committed and only the answer
was lost (kurrentdbclient resends a request once after a transport error): it is a success.

A read must start at an existing commit position: `read_all(after)` with a position that is no
event's (`sluice log tail` reads from `head - n`) pages from the start to the last event before it.

recorded_at comes from the injected clock and is stored in the metadata (`~recorded_at`; the
server's own time is the fallback for events written by other tools). Subscriptions poll
`read_all` and are woken at once by this instance's appends, as the SQL adapters do.
"""
from __future__ import annotations

import uuid
from datetime import timezone
from typing import AsyncIterator, Callable, Iterable, Protocol, Sequence, TypeVar

from kurrentdbclient import KurrentDBClient, NewEvents
from kurrentdbclient import RecordedEvent as KurrentRecordedEvent
from kurrentdbclient.exceptions import InvalidCommitPositionError, NotFoundError, WrongCurrentVersionError

from sluice.clock import Clock, SystemClock
from sluice.eventlog import kurrentdb_snapshots
from sluice.eventlog.snapshots import Snapshot
from sluice.eventlog.kurrentdb_codec import (
    Attempt,
    after_position,
    build_attempt,
    check_in_order,
    checkpoint_stream,
    checkpoint_value,
    decode_event,
    merge_appends,
    parse_url,
    plan_bases,
    stream_filter,
    stream_name,
    unique_ids,
    validate_prefix,
    versions_after,
    versions_to_read,
)
from sluice.eventlog.port import (
    NO_STREAM,
    Checkpoint,
    DuplicateEventId,
    NewEvent,
    RecordedEvent,
    StreamAppend,
    WrongExpectedVersion,
    check_expected_checkpoints,
    head_then_read,
    stream_prefixes,
    versions_read,
)
from sluice.eventlog.subscription import Subscribers

ATTEMPTS = 32
"""Appends lost to concurrent writers on ANY streams before giving up (each loss means another writer progressed)."""
T = TypeVar("T")
SCAN_PAGE = 1000
"""Events per read when looking for where to start reading after a position that is no event's."""


class KurrentClient(Protocol):
    """The part of kurrentdbclient's KurrentDBClient this adapter uses (tests inject a fake of it)."""

    def multi_append_to_stream(self, events: Iterable[NewEvents], *, timeout: float | None = None) -> int: ...

    def get_stream(self, stream_name: str, *, stream_position: int | None = None, backwards: bool = False,
                   limit: int = ...) -> Sequence[KurrentRecordedEvent]: ...

    def read_all(self, *, commit_position: int | None = None, filter_include: Sequence[str] = (),
                 filter_by_stream_name: bool = False, limit: int = ...) -> Iterable[KurrentRecordedEvent]: ...

    def get_commit_position(self, *, filter_include: Sequence[str] = (),
                            filter_by_stream_name: bool = False) -> int: ...

    def close(self) -> None: ...


class EventLogClosed(RuntimeError):
    """The log was used after close()."""


class KurrentEventLog:
    """The EventLog port over KurrentDB. Thread-safe (kurrentdbclient is); keeps no state of its own,
    so any number of instances and processes may share a server and prefix."""

    def __init__(self, client: KurrentClient, *, prefix: str = "", clock: Clock | None = None,
                 poll_interval: float = 0.05, new_uuid: Callable[[], uuid.UUID] = uuid.uuid4) -> None:
        validate_prefix(prefix)
        self._client = client
        self._prefix = prefix
        self._filter = [stream_filter(prefix)]
        self._clock = clock or SystemClock()
        self._new_uuid = new_uuid
        self._closed = False
        self._subscribers = Subscribers(self._poll, poll_interval, lambda: self._closed, EventLogClosed,
                                        self._poll_to_head)

    @property
    def prefix(self) -> str:
        return self._prefix

    @classmethod
    def from_url(cls, url: str, *, clock: Clock | None = None, poll_interval: float = 0.05) -> KurrentEventLog:
        """`kurrentdb://host:2113?tls=false[&streamPrefix=...]` (any scheme kurrentdbclient knows)."""
        client_url, prefix = parse_url(url)
        return cls(KurrentDBClient(client_url), prefix=prefix, clock=clock, poll_interval=poll_interval)

    # -- writing -------------------------------------------------------------------------------

    def append(self, stream: str, events: Sequence[NewEvent], expected_version: int, *,
               checkpoints: Sequence[Checkpoint] = ()) -> int:
        return self.append_batch([StreamAppend(stream, events, expected_version)], checkpoints=checkpoints)[0]

    def append_batch(self, appends: Sequence[StreamAppend], *, checkpoints: Sequence[Checkpoint] = ()) -> list[int]:
        self._check_open()
        for append in appends:
            stream_name(self._prefix, append.stream)  # refuses reserved names before anything is sent
        unique_ids(appends)
        recorded_at = self._clock.now().astimezone(timezone.utc)
        conflict: WrongCurrentVersionError | None = None
        for _ in range(ATTEMPTS):
            parts = merge_appends(appends)
            bases = None if parts is None else plan_bases(parts, self._versions(versions_to_read(parts)))
            if parts is None or bases is None:
                self._explain(appends, duplicate=None)  # raises: some expected version cannot hold
                continue
            attempt = build_attempt(self._prefix, parts, bases, checkpoints, recorded_at, self._new_uuid,
                                    self._checked_checkpoints(checkpoints))
            conflict = self._send(attempt)
            if conflict is None:
                if attempt.has_events:
                    self._subscribers.notify(append.stream for append in appends if append.events)
                return versions_after(appends, bases)
            self._explain(appends, duplicate=attempt.reservations.get(conflict.stream_name or ""))
        raise self._gave_up(appends, conflict)

    def save_checkpoint(self, checkpoint: Checkpoint) -> None:
        self.append_batch([], checkpoints=[checkpoint])

    def _checked_checkpoints(self, checkpoints: Sequence[Checkpoint]) -> dict[str, int]:
        """Each checkpoint with `expected` checked against its stream's last event, and that stream's
        version: the append expects it, so a save in between fails the append (read again, it raises)."""
        versions, stored = {}, {}
        for checkpoint in checkpoints:
            if checkpoint.expected is not None and checkpoint.name not in versions:
                last = self._last(checkpoint_stream(self._prefix, checkpoint.name))
                versions[checkpoint.name] = NO_STREAM if last is None else last.stream_position
                if last is not None:
                    stored[checkpoint.name] = checkpoint_value(last)
        check_expected_checkpoints(checkpoints, stored)
        return versions

    def _send(self, attempt: Attempt) -> WrongCurrentVersionError | None:
        if not attempt.requests:
            return None
        try:
            self._client.multi_append_to_stream(attempt.requests)
        except WrongCurrentVersionError as conflict:
            return None if self._committed_anyway(attempt) else conflict
        return None

    def _committed_anyway(self, attempt: Attempt) -> bool:
        """A resent request whose first try had committed: its own reservation is in place."""
        if attempt.first_reservation is None:
            return False
        stream, reservation_id = attempt.first_reservation
        last = self._last(stream)
        return last is not None and last.id == reservation_id

    def _explain(self, appends: Sequence[StreamAppend], duplicate: str | None) -> None:
        """Raise the port's error for a rejected attempt; return if a retry may succeed (an ANY stream moved)."""
        check_in_order(appends, self._versions(list(dict.fromkeys(a.stream for a in appends))))
        if duplicate is not None:
            raise DuplicateEventId(duplicate)

    def _gave_up(self, appends: Sequence[StreamAppend], conflict: WrongCurrentVersionError | None) -> Exception:
        """After ATTEMPTS lost races, the conflict as the port names it."""
        for append in appends:
            if conflict is not None and stream_name(self._prefix, append.stream) == conflict.stream_name:
                actual = self._versions([append.stream])[append.stream]
                return WrongExpectedVersion(append.stream, append.expected_version, actual)
        return RuntimeError(f"append_batch gave up after {ATTEMPTS} attempts: {conflict}")

    # -- reading -------------------------------------------------------------------------------

    def read_stream(self, stream: str, from_version: int = 0, limit: int | None = None) -> list[RecordedEvent]:
        self._check_open()
        try:
            events = self._client.get_stream(stream_name(self._prefix, stream), stream_position=from_version or None,
                                             **({} if limit is None else {"limit": limit}))
        except NotFoundError:
            return []
        return [decode_event(self._prefix, event) for event in events]

    def stream_version(self, stream: str) -> int:
        self._check_open()
        last = self._last(stream_name(self._prefix, stream))
        return NO_STREAM if last is None else last.stream_position

    def read_all(self, after: int = 0, limit: int = 1000, prefixes: Sequence[str] = ()) -> list[RecordedEvent]:
        """With `prefixes`, the server filters (a stream-name regex): skipped events never come over."""
        self._check_open()
        if limit <= 0:
            return []
        prefixes = stream_prefixes(prefixes)
        chosen = [stream_filter(self._prefix, prefixes)] if prefixes else self._filter
        try:
            events = self._read_after(after, limit, chosen)
        except InvalidCommitPositionError:  # `after` is no event's position (an operator's `head - n`)
            events = self._read_after(self._anchor(after), limit, chosen)
        return [decode_event(self._prefix, event) for event in events]

    def read_all_to_head(self, after: int = 0, limit: int = 1000,
                         prefixes: Sequence[str] = ()) -> tuple[list[RecordedEvent], int]:
        return head_then_read(self, after, limit, prefixes)

    def stream_versions(self, after: int = 0, prefixes: Sequence[str] = ()) -> dict[str, int]:
        """The server sends whole events either way: read_all's, page by page."""
        return versions_read(self, after, prefixes)

    def _read_after(self, after: int, limit: int, filter_include: Sequence[str]) -> list[KurrentRecordedEvent]:
        start = after if after > 0 else None  # must be an existing position; the read includes its event
        events = self._client.read_all(commit_position=start, filter_include=filter_include,
                                       filter_by_stream_name=True, limit=limit + 1 if start else limit)
        return after_position(events, after)[:limit]

    def _anchor(self, after: int) -> int:
        """The position of this log's last event at or before `after` (0 if none): paged from the start."""
        anchor = 0
        while page := self._read_after(anchor, SCAN_PAGE, self._filter):
            for event in page:
                if event.commit_position > after:
                    return anchor
                anchor = event.commit_position
        return anchor

    def head_position(self) -> int:
        self._check_open()
        return self._client.get_commit_position(filter_include=self._filter, filter_by_stream_name=True)

    def read_checkpoint(self, name: str) -> int | None:
        self._check_open()
        last = self._last(checkpoint_stream(self._prefix, name))
        return None if last is None else checkpoint_value(last)

    def read_checkpoints(self, names: Iterable[str]) -> dict[str, int]:
        """A read per name: each checkpoint is its own stream."""
        found = {name: self.read_checkpoint(name) for name in dict.fromkeys(names)}
        return {name: value for name, value in found.items() if value is not None}

    def subscribe(self, after: int = 0, prefixes: Sequence[str] = ()) -> AsyncIterator[RecordedEvent]:
        return self._subscribers.follow(after, prefixes)

    def subscribe_batches(self, after: int = 0, prefixes: Sequence[str] = ()) -> AsyncIterator[list[RecordedEvent]]:
        return self._subscribers.follow_batches(after, prefixes)

    # -- snapshots (sluice.eventlog.snapshots, stored as kurrentdb_snapshots describes) ----------

    def save_snapshot(self, snapshot: Snapshot) -> None:
        self._check_open()
        self._client.multi_append_to_stream([kurrentdb_snapshots.saved(self._prefix, snapshot, self._new_uuid())])

    def read_snapshot(self, name: str) -> Snapshot | None:
        self._check_open()
        return kurrentdb_snapshots.snapshot_of(name, self._last(kurrentdb_snapshots.snapshot_stream(self._prefix, name)))

    def delete_snapshot(self, name: str) -> bool:
        if self.read_snapshot(name) is None:
            return False
        self._client.multi_append_to_stream([kurrentdb_snapshots.deleted(self._prefix, name, self._new_uuid())])
        return True

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._client.close()
        self._subscribers.notify()

    # -- helpers -------------------------------------------------------------------------------

    def _last(self, kurrent_stream: str) -> KurrentRecordedEvent | None:
        try:
            events = self._client.get_stream(kurrent_stream, backwards=True, limit=1)
        except NotFoundError:
            return None
        return events[0] if events else None

    def _versions(self, streams: Sequence[str]) -> dict[str, int]:
        versions = {}
        for stream in streams:
            last = self._last(stream_name(self._prefix, stream))
            versions[stream] = NO_STREAM if last is None else last.stream_position
        return versions

    def _poll(self, after: int, limit: int, prefixes: Sequence[str]) -> list[RecordedEvent]:
        """read_all for subscribers: a read cut short by close() ends the subscription quietly."""
        return self._unless_closed(lambda: self.read_all(after, limit, prefixes))

    def _poll_to_head(self, after: int, limit: int, prefixes: Sequence[str]) -> tuple[list[RecordedEvent], int]:
        return self._unless_closed(lambda: self.read_all_to_head(after, limit, prefixes))

    def _unless_closed(self, read: Callable[[], T]) -> T:
        try:
            return read()
        except Exception as error:
            if self._closed:
                raise EventLogClosed("closed while reading") from error
            raise

    def _check_open(self) -> None:
        if self._closed:  # kurrentdbclient would silently reconnect a closed client
            raise EventLogClosed("the KurrentDB event log is closed")
