"""The event log port: an append-only log of streams with optimistic concurrency.

Every adapter (SQLite, PostgreSQL, KurrentDB) passes the same contract suite in
tests/integration/eventlog/contract.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import AsyncIterator, Iterable, Mapping, Protocol, Sequence

NO_STREAM = -1
"""Expected version meaning: the stream must not exist yet."""
ANY_VERSION = -2
"""Expected version meaning: append whatever the stream's version."""


class WrongExpectedVersion(Exception):
    """Optimistic concurrency conflict: another writer appended first."""

    def __init__(self, stream: str, expected: int, actual: int) -> None:
        super().__init__(f"stream {stream!r}: expected version {expected}, actual {actual}")
        self.stream = stream
        self.expected = expected
        self.actual = actual


class CheckpointMoved(WrongExpectedVersion):
    """A checkpoint appended with `expected` had another value: another writer saved it since it was
    read (a consumer group moved its partition). Nothing was written."""

    def __init__(self, name: str, expected: int, actual: int) -> None:
        Exception.__init__(self, f"checkpoint {name!r}: expected {expected}, actual {actual}")
        self.stream = name
        self.expected = expected
        self.actual = actual


class DuplicateEventId(Exception):
    """An appended event's id is already in the log (or twice in one append); nothing was written."""

    def __init__(self, event_id: str) -> None:
        super().__init__(f"event id {event_id!r} already exists in the log")
        self.event_id = event_id


class EventLogUnavailable(Exception):
    """An infrastructure failure, not a refusal: the log cannot be reached or cannot write now (connection
    lost, server down or restarting, read-only during a failover, disk full, a timeout). Raised after the
    adapter's own retries; retrying later is right, and the work waits rather than being dead-lettered.

    An append that raises it did not finish: the adapter retried one whose outcome it could not know, and
    a retry that finds the append's event ids (the ones it was first sent with) already in the log returns
    as committed. When it still raises, the append may yet have committed, so a caller retries with the same
    ids (or reloads and decides again): a duplicate id then means it was written."""


class EventLogNotMigrated(Exception):
    """The store's schema is missing or older than this code's (PostgreSQL: run `sluice migrate`), or newer (a
    later release wrote it)."""


@dataclass(frozen=True)
class NewEvent:
    id: str                                   # unique; the id under which the event is published
    type: str                                 # past tense, e.g. "ScheduleCreated"
    data: bytes                               # serialized by the caller (JSON in Sluice)
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RecordedEvent:
    id: str
    stream: str
    version: int                              # 0-based index within the stream
    position: int                             # global position, > 0, increasing in commit order
    type: str
    data: bytes
    metadata: Mapping[str, str]
    recorded_at: datetime                     # timezone-aware UTC, taken from the adapter's clock


@dataclass(frozen=True)
class StreamAppend:
    stream: str
    events: Sequence[NewEvent]
    expected_version: int                     # exact version, NO_STREAM or ANY_VERSION


@dataclass(frozen=True)
class Checkpoint:
    """A named position (e.g. a consumer's bus offset) stored atomically with an append."""

    name: str
    value: int
    expected: int | None = None
    """When set, the append checks that the stored value (0 when never saved) is still this one,
    atomically with its writes, and raises CheckpointMoved otherwise."""


class EventLog(Protocol):
    def append(
        self,
        stream: str,
        events: Sequence[NewEvent],
        expected_version: int,
        *,
        checkpoints: Sequence[Checkpoint] = (),
    ) -> int:
        """Append atomically, with `checkpoints` in the same transaction; return the stream's new version.

        Raises WrongExpectedVersion (or DuplicateEventId) and then writes nothing, checkpoints
        included. Appending no events still checks the version, writes the checkpoints and
        returns the current version."""
        ...

    def append_batch(self, appends: Sequence[StreamAppend], *, checkpoints: Sequence[Checkpoint] = ()) -> list[int]:
        """Append to several streams all-or-nothing; return each stream's new version.

        A conflict on any stream writes nothing at all. A stream named twice is appended in order."""
        ...

    def read_stream(self, stream: str, from_version: int = 0, limit: int | None = None) -> list[RecordedEvent]:
        """Events of one stream from `from_version` on, at most `limit` of them when given; [] for a
        stream that does not exist."""
        ...

    def stream_version(self, stream: str) -> int:
        """The version of the stream's last event, NO_STREAM (-1) if it has none."""
        ...

    def read_all(self, after: int = 0, limit: int = 1000, prefixes: Sequence[str] = ()) -> list[RecordedEvent]:
        """Events of every stream with position > after, in position order, at most `limit`; with
        `prefixes`, only those of streams starting with one of them (chosen by the store, the others
        are not decoded). Positions stay the log's global positions.

        Never skips an event: whatever a later call returns has a position greater than
        everything returned before (adapters whose positions are assigned before commit
        must hold back until earlier positions are resolved). So a filtered reader that read
        `head_position()` before a read that returned fewer than `limit` events may go on from
        that head: nothing matching lies between."""
        ...

    def read_all_to_head(self, after: int = 0, limit: int = 1000,
                         prefixes: Sequence[str] = ()) -> tuple[list[RecordedEvent], int]:
        """`read_all` and the head position, as of the same moment or the head read first (one
        round trip where the store allows): when fewer than `limit` events came back, nothing
        matching lies after the last of them up to that head."""
        ...

    def stream_versions(self, after: int = 0, prefixes: Sequence[str] = ()) -> dict[str, int]:
        """The version of the last event of every stream that has events with position > after
        (with `prefixes`, of the streams starting with one of them): which streams moved, without
        reading their events (an aggregate store before its snapshot, over thousands of its own)."""
        ...

    def head_position(self) -> int:
        """The position of the last committed event, 0 for an empty log."""
        ...

    def read_checkpoint(self, name: str) -> int | None: ...

    def read_checkpoints(self, names: Iterable[str]) -> dict[str, int]:
        """The saved checkpoints among `names` (one read, where the store allows): a name never saved is absent."""
        ...

    def save_checkpoint(self, checkpoint: Checkpoint) -> None: ...

    def subscribe(self, after: int = 0, prefixes: Sequence[str] = ()) -> AsyncIterator[RecordedEvent]:
        """Catch up from `after`, then wait for and yield new events as they commit, forever; with
        `prefixes`, only the events of streams starting with one of them (as read_all).

        Never skips nor repeats an event; cancelling the consuming task ends it cleanly. A
        filtered subscription moves past the events it skips: it does not read them again."""
        ...

    def subscribe_batches(self, after: int = 0, prefixes: Sequence[str] = ()) -> AsyncIterator[list[RecordedEvent]]:
        """`subscribe`, a read at a time: each list holds the events of one read, in order, never empty."""
        ...

    def close(self) -> None:
        """Release the store; calling it again does nothing."""
        ...


def versions_read(log: EventLog, after: int, prefixes: Sequence[str], page: int = 1000) -> dict[str, int]:
    """`stream_versions` from the events themselves, for a log that cannot be asked for less."""
    versions: dict[str, int] = {}
    while events := log.read_all(after, page, prefixes):
        for event in events:
            versions[event.stream] = max(versions.get(event.stream, NO_STREAM), event.version)
        after = events[-1].position
    return versions


def head_then_read(log: EventLog, after: int, limit: int,
                   prefixes: Sequence[str]) -> tuple[list[RecordedEvent], int]:
    """`read_all_to_head` in two reads, the head first, for a log that cannot do both in one."""
    head = log.head_position()
    return (log.read_all(after, limit, prefixes) if head > after else []), head


def check_expected_checkpoints(checkpoints: Sequence[Checkpoint], stored: Mapping[str, int]) -> None:
    """The port's rule for checkpoints appended with `expected`: `stored` holds their saved values."""
    for checkpoint in checkpoints:
        if checkpoint.expected is not None and stored.get(checkpoint.name, 0) != checkpoint.expected:
            raise CheckpointMoved(checkpoint.name, checkpoint.expected, stored.get(checkpoint.name, 0))


def stream_prefixes(prefixes: Sequence[str]) -> tuple[str, ...]:
    """A read's stream filter as every adapter takes it: () reads everything (so does a "" among them)."""
    if isinstance(prefixes, str):
        raise TypeError(f"prefixes: a sequence of stream prefixes, not the string {prefixes!r}")
    for prefix in prefixes:
        if not isinstance(prefix, str):
            raise TypeError(f"prefixes: stream prefixes are strings, not {prefix!r}")
    if "" in prefixes:
        return ()
    return tuple(dict.fromkeys(prefixes))


def in_streams(stream: str, prefixes: Sequence[str]) -> bool:
    """Whether a read filtered by `prefixes` (normalised by stream_prefixes) includes the stream."""
    return not prefixes or stream.startswith(tuple(prefixes))


def check_expected_version(stream: str, expected: int, actual: int) -> None:
    """The port's rule for every adapter: ANY_VERSION passes, NO_STREAM (-1) is the version of a
    stream without events, anything else must equal the stream's current version."""
    if expected == ANY_VERSION:
        return
    if expected < NO_STREAM:
        raise ValueError(f"invalid expected version {expected} for stream {stream!r}")
    if expected != actual:
        raise WrongExpectedVersion(stream, expected, actual)
