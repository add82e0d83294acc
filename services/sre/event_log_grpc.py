"""gRPC EventLog: `sluice log` online, read-only, for the console's event-log page. Every answer is
bounded by its page size; listing streams asks the log for every stream's version (one query), so
a prefix keeps it short on a large log."""
from __future__ import annotations

import asyncio
from bisect import bisect_right

from sluice.domain.errors import InvalidArgument, NotFound
from sluice.eventlog.port import EventLog, RecordedEvent
from sluice.paging import next_page_token, paging
from sluice.runtime.grpc_server import GrpcBinding, grpc_errors
from sluice.v1 import event_log_pb2, event_log_pb2_grpc
from sluice_services.streams import read_stream

LISTING = "EventLog.ListStreams"
DEFAULT_EVENTS, MAX_EVENTS = 100, 1_000


class EventLogServicer(event_log_pb2_grpc.EventLogServicer):
    def __init__(self, log: EventLog) -> None:
        self._log = log

    @grpc_errors
    async def ListStreams(self, request, context):
        size, after = paging(request, LISTING, lambda key: len(key) == 1 and isinstance(key[0], str))
        versions = await asyncio.to_thread(self._log.stream_versions, 0, (request.prefix,) if request.prefix else ())
        names = sorted(versions)
        start = bisect_right(names, after[0]) if after else 0
        shown = names[start:start + size]
        last = (shown[-1],) if shown and start + size < len(names) else None
        return event_log_pb2.ListStreamsResponse(
            streams=[event_log_pb2.LogStream(name=name, events=versions[name] + 1) for name in shown],
            next_page_token=next_page_token(LISTING, last))

    @grpc_errors
    async def ReadStream(self, request, context):
        if not request.stream:
            raise InvalidArgument("stream", "must not be empty")
        if request.from_version < 0:
            raise InvalidArgument("from_version", f"must be 0 or more, got {request.from_version}")
        if request.page_size < 0:
            raise InvalidArgument("page_size", f"must be 0 (the default, {DEFAULT_EVENTS}) or more, got {request.page_size}")
        size = min(request.page_size or DEFAULT_EVENTS, MAX_EVENTS)
        events = await asyncio.to_thread(read_stream, self._log, request.stream, request.from_version, size + 1)
        if not events and not await asyncio.to_thread(read_stream, self._log, request.stream, 0, 1):
            raise NotFound(f"no stream {request.stream!r} in the event log")
        shown = events[:size]
        return event_log_pb2.ReadStreamResponse(
            events=[_to_proto(event) for event in shown],
            next_version=shown[-1].version + 1 if len(events) > size else -1)


def _to_proto(event: RecordedEvent) -> event_log_pb2.LoggedEvent:
    message = event_log_pb2.LoggedEvent(position=event.position, stream=event.stream, version=event.version,
                                        type=event.type, id=event.id, metadata=dict(event.metadata),
                                        data=bytes(event.data))
    message.recorded_at.FromDatetime(event.recorded_at)
    return message


def bindings(log: EventLog) -> list[GrpcBinding]:
    return [GrpcBinding(event_log_pb2.DESCRIPTOR.services_by_name["EventLog"].full_name,
                        event_log_pb2_grpc.add_EventLogServicer_to_server, EventLogServicer(log))]
