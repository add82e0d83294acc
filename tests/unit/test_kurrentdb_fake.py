"""A fake of the part of kurrentdbclient's KurrentDBClient the KurrentDB event-log adapter uses, and
the server behaviour the adapter relies on (`KurrentClientAssumptions`), checked here against the
fake and in tests/integration/eventlog/test_kurrentdb.py against a real server (SLUICE_KURRENTDB_URL).

The fake is NOT KurrentDB and proves nothing about it. It models the behaviour kurrentdbclient
1.3.5 documents for KurrentDB 25.1 (multi-stream append, commit positions, filtered reads), takes
its requests through the real client's request builder (`AppendRequestIterator`, which also does
the client-side metadata check), answers with the real client's exception types, and returns
metadata the way KurrentDB's clients' own tests show it (the properties plus "$schema.*" keys).
Where the documentation leaves a choice (is a resent multi-stream append idempotent?), the fake
does either (`idempotent=`) and the assumptions accept either. Its purpose: run the adapter's own
logic through the contract suite on a machine without a server.
"""
from __future__ import annotations

import json
import re
import sys
import threading
import uuid
from datetime import datetime, timezone
from typing import Callable, Iterable, Iterator, Sequence

import pytest
from kurrentdbclient import DEFAULT_EXCLUDE_FILTER, NewEvent, NewEvents, RecordedEvent, StreamState
from kurrentdbclient.common import construct_filter_exclude_regex, construct_filter_include_regex
from kurrentdbclient.exceptions import (
    InvalidCommitPositionError,
    MultiAppendToSameStreamError,
    NotFoundError,
    ProgrammingError,
    WrongCurrentVersionError,
)
from kurrentdbclient.protos.v2.streams import streams_pb2
from kurrentdbclient.v2streams import AppendRequestIterator

_NO_STREAM, _ANY, _EXISTS = -1, -2, -4


class FakeKurrentServer:
    """In-memory streams and $all. Commit positions grow by the size of each record (not by one)."""

    def __init__(self, *, idempotent: bool = True) -> None:
        self.idempotent = idempotent
        self.resend_next_append = False  # apply the next append twice, as kurrentdbclient resends after a lost reply
        self.before_next_append: Callable[[], None] | None = None  # runs just before the next append applies
        self._lock = threading.Lock()
        self._all: list[RecordedEvent] = []
        self._streams: dict[str, list[RecordedEvent]] = {}
        self._next_position = 4096
        for stream, type_ in (("$settings", "$settings"), ("$stats-127.0.0.1:2113", "$statsCollected")):
            self._record(stream, uuid.uuid4(), type_, b"{}", {}, True)  # the server's own events

    def client(self) -> FakeKurrentClient:
        return FakeKurrentClient(self)

    def multi_append(self, requests: list[streams_pb2.AppendRequest]) -> int:
        hook, self.before_next_append = self.before_next_append, None
        if hook is not None:
            hook()
        position = self._apply(requests)
        if self.resend_next_append:
            self.resend_next_append = False
            position = self._apply(requests)
        return position

    def stream(self, name: str) -> list[RecordedEvent]:
        with self._lock:
            if name not in self._streams:
                raise NotFoundError(f"Stream {name!r} not found")
            return list(self._streams[name])

    def all(self) -> list[RecordedEvent]:
        with self._lock:
            return list(self._all)

    def _apply(self, requests: list[streams_pb2.AppendRequest]) -> int:
        with self._lock:
            seen: set[str] = set()
            for request in requests:
                if request.stream in seen:
                    raise MultiAppendToSameStreamError("stream already in append session", stream_name=request.stream)
                seen.add(request.stream)
            writes = [request for request in requests if self._check(request)]  # all checked before any write
            for request in writes:
                for record in request.records:
                    properties = {key: value.string_value for key, value in record.properties.items()}
                    self._record(request.stream, uuid.UUID(record.record_id), record.schema.name, record.data,
                                 properties, record.schema.format == streams_pb2.SCHEMA_FORMAT_JSON)
            return self._all[-1].commit_position

    def _check(self, request: streams_pb2.AppendRequest) -> bool:
        """False for an idempotent resend (nothing to write); raises on a wrong expected revision."""
        existing = self._streams.get(request.stream, [])
        expected = request.expected_revision if request.HasField("expected_revision") else _ANY
        ids = [uuid.UUID(record.record_id) for record in request.records]
        if self.idempotent and ids:
            if expected == _ANY and set(ids) <= {event.id for event in existing}:
                return False
            start = expected + 1 if expected >= _NO_STREAM else None
            if start is not None and [e.id for e in existing[start:start + len(ids)]] == ids:
                return False
        actual = len(existing) - 1
        if not (expected == _ANY or (expected == _EXISTS and actual >= 0) or expected == actual):
            raise WrongCurrentVersionError(f"stream {request.stream!r}: expected {expected}, actual {actual}",
                                           stream_name=request.stream, actual_version=actual, expected_version=expected)
        return True

    def _record(self, stream: str, event_id: uuid.UUID, type_: str, data: bytes, properties: dict[str, str],
                is_json: bool) -> None:
        metadata = json.dumps({**properties, "$schema.name": type_, "$schema.format": "Json" if is_json else "Bytes"})
        events = self._streams.setdefault(stream, [])
        event = RecordedEvent(type=type_, data=bytes(data), metadata=metadata.encode(),
                              content_type="application/json" if is_json else "application/octet-stream",
                              id=event_id, stream_name=stream, stream_position=len(events),
                              commit_position=self._next_position, prepare_position=self._next_position,
                              recorded_at=datetime.now(timezone.utc))
        self._next_position += 96 + len(stream) + len(data) + len(metadata)
        events.append(event)
        self._all.append(event)


class FakeKurrentClient:
    """The KurrentDBClient methods the adapter calls, with their signatures and exception types."""

    def __init__(self, server: FakeKurrentServer) -> None:
        self.server = server
        self.closed = False

    def multi_append_to_stream(self, events: NewEvents | Iterable[NewEvents], *, timeout: float | None = None) -> int:
        self._check_open()
        requests = list(AppendRequestIterator([events] if isinstance(events, NewEvents) else events))
        return self.server.multi_append(requests)

    def get_stream(self, stream_name: str, *, stream_position: int | None = None, backwards: bool = False,
                   limit: int = sys.maxsize, timeout: float | None = None) -> tuple[RecordedEvent, ...]:
        self._check_open()
        events = self.server.stream(stream_name)
        if backwards:
            events = [e for e in reversed(events) if stream_position is None or e.stream_position <= stream_position]
        else:
            events = events[stream_position or 0:]
        return tuple(events[:limit])

    def read_all(self, *, commit_position: int | None = None, filter_exclude: Sequence[str] = DEFAULT_EXCLUDE_FILTER,
                 filter_include: Sequence[str] = (), filter_by_stream_name: bool = False, limit: int = sys.maxsize,
                 timeout: float | None = None) -> Iterator[RecordedEvent]:
        self._check_open()
        events = self.server.all()
        if commit_position is not None:
            starts = [n for n, event in enumerate(events) if event.commit_position == commit_position]
            if not starts:
                raise InvalidCommitPositionError(f"Unexpected FilteredReadAllResult: InvalidPosition {commit_position}")
            events = events[starts[0]:]
        regex = re.compile(construct_filter_include_regex(filter_include) if filter_include
                           else construct_filter_exclude_regex(filter_exclude))
        matching = [e for e in events if regex.search(e.stream_name if filter_by_stream_name else e.type)]
        return iter(matching[:limit])

    def get_commit_position(self, *, filter_exclude: Sequence[str] = DEFAULT_EXCLUDE_FILTER,
                            filter_include: Sequence[str] = (), filter_by_stream_name: bool = False,
                            timeout: float | None = None) -> int:
        events = list(self.read_all(filter_exclude=filter_exclude, filter_include=filter_include,
                                    filter_by_stream_name=filter_by_stream_name))
        return events[-1].commit_position if events else 0

    def close(self) -> None:
        self.closed = True

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError("Cannot invoke RPC on closed channel!")


# -- what the adapter assumes of KurrentDB, for the fake and for a real server ---------------------


def _event(type_: str = "Happened", data: bytes = b"{}", metadata: bytes = b"", **kwargs: object) -> NewEvent:
    return NewEvent(type=type_, data=data, metadata=metadata, **kwargs)  # type: ignore[arg-type]


class KurrentClientAssumptions:
    """Subclasses implement `make_client`; every test works on streams under a fresh random prefix."""

    def make_client(self):  # -> KurrentDBClient or FakeKurrentClient
        raise NotImplementedError

    @pytest.fixture
    def client(self):
        client = self.make_client()
        yield client
        client.close()

    @pytest.fixture
    def prefix(self) -> str:
        return f"assume-{uuid.uuid4().hex[:12]}-"

    def _read(self, client, prefix: str, **kwargs: object) -> list[RecordedEvent]:
        pattern = re.escape(prefix) + r"(?![@$])[\s\S]*"  # the adapter's stream filter
        return list(client.read_all(filter_include=[pattern], filter_by_stream_name=True, **kwargs))

    def test_multi_append_writes_all_streams_or_none(self, client, prefix: str) -> None:
        a, b = prefix + "a", prefix + "b"
        with pytest.raises(WrongCurrentVersionError) as raised:
            client.multi_append_to_stream([NewEvents(a, [_event()], StreamState.NO_STREAM), NewEvents(b, [_event()], 0)])
        assert raised.value.stream_name == b
        assert raised.value.actual_version == StreamState.NO_STREAM
        with pytest.raises(NotFoundError):
            client.get_stream(a)

        client.multi_append_to_stream([NewEvents(a, [_event(), _event()], StreamState.NO_STREAM)])
        with pytest.raises(WrongCurrentVersionError) as raised:
            client.multi_append_to_stream([NewEvents(a, [_event()], 0)])
        assert (raised.value.stream_name, raised.value.actual_version) == (a, 1)

    def test_a_stream_twice_in_one_append_is_refused(self, client, prefix: str) -> None:
        stream = prefix + "twice"
        with pytest.raises(MultiAppendToSameStreamError):
            client.multi_append_to_stream([NewEvents(stream, [_event()], StreamState.NO_STREAM),
                                           NewEvents(stream, [_event()], 0)])

    def test_each_event_has_its_own_increasing_commit_position(self, client, prefix: str) -> None:
        returned = client.multi_append_to_stream([NewEvents(prefix + "x", [_event(), _event()], StreamState.NO_STREAM),
                                                  NewEvents(prefix + "y", [_event(), _event()], StreamState.NO_STREAM)])
        read = self._read(client, prefix)
        positions = [e.commit_position for e in read]
        assert [(e.stream_name, e.stream_position) for e in read] == [
            (prefix + "x", 0), (prefix + "x", 1), (prefix + "y", 0), (prefix + "y", 1)]
        assert all(0 < p < q for p, q in zip(positions, positions[1:]))
        assert returned == positions[-1]

    def test_a_read_from_a_position_includes_it_and_the_limit_counts_matching_events(self, client, prefix: str) -> None:
        for n in range(4):
            client.multi_append_to_stream([NewEvents(prefix + "s", [_event()], n - 1 if n else StreamState.NO_STREAM),
                                           NewEvents(prefix + f"@id-{n}", [_event()], StreamState.NO_STREAM)])
        full = self._read(client, prefix)
        assert [e.stream_position for e in full] == [0, 1, 2, 3]
        assert self._read(client, prefix, commit_position=full[1].commit_position, limit=2) == full[1:3]

    def test_the_stream_filter_sees_only_the_prefixes_sluice_streams(self, client, prefix: str) -> None:
        assert self._read(client, prefix) == []
        assert client.get_commit_position(filter_include=[re.escape(prefix) + r"(?![@$])[\s\S]*"],
                                          filter_by_stream_name=True) == 0
        client.multi_append_to_stream([NewEvents(prefix + "s", [_event()], StreamState.NO_STREAM),
                                       NewEvents(prefix + "@checkpoint-c", [_event()], StreamState.ANY),
                                       NewEvents("other-" + prefix + "s", [_event()], StreamState.NO_STREAM)])
        read = self._read(client, prefix)
        assert [e.stream_name for e in read] == [prefix + "s"]
        assert client.get_commit_position(filter_include=[re.escape(prefix) + r"(?![@$])[\s\S]*"],
                                          filter_by_stream_name=True) == read[0].commit_position

    def test_get_stream_forwards_from_a_position_and_backwards(self, client, prefix: str) -> None:
        stream = prefix + "s"
        with pytest.raises(NotFoundError):
            client.get_stream(stream, backwards=True, limit=1)
        events = [_event(f"E{n}") for n in range(3)]
        client.multi_append_to_stream([NewEvents(stream, events, StreamState.NO_STREAM)])
        assert [e.type for e in client.get_stream(stream, stream_position=1)] == ["E1", "E2"]
        assert client.get_stream(stream, stream_position=3) == ()
        (last,) = client.get_stream(stream, backwards=True, limit=1)
        assert (last.type, last.stream_position, last.id) == ("E2", 2, events[2].id)

    def test_data_bytes_and_string_metadata_round_trip(self, client, prefix: str) -> None:
        odd_json = b'{ "a" :  1,\n"b":[ ] }'
        binary = bytes(range(256))
        metadata = {"k": "v", "uni": "héllo ✓", "~x": "y"}
        events = [_event("J", odd_json, json.dumps(metadata).encode()),
                  _event("B", binary, content_type="application/octet-stream"),
                  _event("E", b"", content_type="application/octet-stream")]
        client.multi_append_to_stream([NewEvents(prefix + "s", events, StreamState.NO_STREAM)])
        read = client.get_stream(prefix + "s")
        assert [(e.id, e.type, e.data) for e in read] == [(e.id, e.type, e.data) for e in events]
        stored = json.loads(read[0].metadata)
        assert {k: v for k, v in stored.items() if not k.startswith("$")} == metadata
        assert read[0].recorded_at is not None and read[0].recorded_at.tzinfo is not None

    def test_metadata_must_be_a_json_object_of_strings(self, client, prefix: str) -> None:
        with pytest.raises(ProgrammingError):
            client.multi_append_to_stream([NewEvents(prefix + "s", [_event(metadata=b'{"n": 1}')], StreamState.ANY)])

    def test_an_id_already_in_another_stream_is_accepted(self, client, prefix: str) -> None:
        """Why the adapter reserves ids in streams of their own: the server does not refuse them."""
        event = _event()
        client.multi_append_to_stream([NewEvents(prefix + "a", [event], StreamState.NO_STREAM)])
        client.multi_append_to_stream([NewEvents(prefix + "b", [event], StreamState.NO_STREAM)])
        assert client.get_stream(prefix + "b")[0].id == event.id

    def test_a_resent_append_never_writes_twice(self, client, prefix: str) -> None:
        """A resend (same ids, same expected revision) succeeds without writing, or is refused."""
        request = [NewEvents(prefix + "s", [_event()], StreamState.NO_STREAM),
                   NewEvents(prefix + "@id-r", [_event()], StreamState.NO_STREAM)]
        client.multi_append_to_stream(request)
        try:
            client.multi_append_to_stream(request)
        except WrongCurrentVersionError:
            pass
        assert len(client.get_stream(prefix + "s")) == 1
        assert len(client.get_stream(prefix + "@id-r")) == 1


class TestFakeClientAssumptions(KurrentClientAssumptions):
    def make_client(self) -> FakeKurrentClient:
        return FakeKurrentServer().client()


class TestFakeWithoutIdempotenceAssumptions(KurrentClientAssumptions):
    def make_client(self) -> FakeKurrentClient:
        return FakeKurrentServer(idempotent=False).client()


def test_the_fake_refuses_calls_after_close() -> None:
    client = FakeKurrentServer().client()
    client.close()
    with pytest.raises(ValueError, match="closed channel"):
        client.get_stream("s")


def test_the_fake_refuses_a_read_from_a_position_that_is_no_event() -> None:
    client = FakeKurrentServer().client()
    position = client.multi_append_to_stream([NewEvents("s", [_event()], StreamState.NO_STREAM)])
    with pytest.raises(InvalidCommitPositionError):
        list(client.read_all(commit_position=position + 1, filter_include=["s"], filter_by_stream_name=True))
