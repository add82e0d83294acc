"""gRPC edge of run now and backfill (sluice.v1.Jobs): requests checked and converted here, decided in
the checker's aggregate (sluice.domain.backfills), the partitions of a partition-trigger backfill
listed from the datasets service first (`PartitionSource`)."""
from __future__ import annotations

import re
from datetime import datetime

from sluice.clock import epoch_micros
from sluice.domain import backfills, bounds
from sluice.domain.backfills import (
    Backfill,
    BackfillRequested,
    CancelBackfill,
    ManualJobRequested,
    RunScheduleNow,
    StartBackfill,
)
from sluice.domain.request_book import RequestBook
from sluice.domain.errors import InvalidArgument, NotFound
from sluice.paging import after_key, fill_page, is_time_and_id, next_page_token, paging
from sluice.runtime.grpc_server import grpc_errors
from sluice.v1 import datasets_pb2, jobs_pb2
from sluice.wire.common import timestamp_from_proto, timestamp_to_proto
from sluice_services.checker.partitions import PartitionSource
from sluice_services.checker.service import CheckerService

MAX_REQUEST_ID_BYTES = 200
MAX_KEY_RANGES = 32
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:@/-]*")
_FORWARDED = ("authorization",)
"""The caller's credentials, passed on to the datasets service when listing partitions for it."""


class RunControlRpcs:
    """RunSchedule and the backfill RPCs of the Jobs servicer."""

    _checker: CheckerService
    _partitions: PartitionSource

    @grpc_errors
    async def RunSchedule(self, request, context):
        schedule_id = _required_id(request.schedule_id, "schedule_id")
        command = RunScheduleNow(schedule_id, dict(request.properties),
                                 timestamp_from_proto(request.logical_time, "logical_time")
                                 if request.HasField("logical_time") else None,
                                 request.ignore_constraints, _request_id(request.request_id))
        events = self._checker.request(command)
        requested = next((e for e in events if isinstance(e, ManualJobRequested)), None)
        job_id = requested.job.id if requested is not None else \
            self._checker.state.requested.requested("run", schedule_id, command.request_id)
        return jobs_pb2.RunScheduleResponse(job_id=job_id)

    @grpc_errors
    async def StartBackfill(self, request, context):
        schedule_id = _required_id(request.schedule_id, "schedule_id")
        start = timestamp_from_proto(request.start, "start") if request.HasField("start") else None
        end = timestamp_from_proto(request.end, "end") if request.HasField("end") else None
        request_id = _request_id(request.request_id)
        partitions, keys = None, ""
        if request.keys:
            keys = ", ".join(f"{k.name}={k.lower}..{k.upper}" for k in request.keys)
            partitions = await self._listed(schedule_id, request.keys, start, end, context)
        command = StartBackfill(schedule_id, start, end, partitions, request_id, keys,
                                tuple((k.name, k.lower, k.upper) for k in request.keys))
        events = self._checker.request(command)
        requested = next((e for e in events if isinstance(e, BackfillRequested)), None)
        book = self._checker.state.requested
        backfill_id = requested.backfill_id if requested is not None else book.requested(
            "backfill", schedule_id, request_id)
        return backfill_to_proto(book.backfills[backfill_id], book)

    @grpc_errors
    async def GetBackfill(self, request, context):
        return backfill_to_proto(self._backfill(request.id), self._checker.state.requested)

    @grpc_errors
    async def ListBackfills(self, request, context):
        """A page of the backfills, oldest first: at most page_size, and no more than MAX_PAGE_BYTES."""
        size, after = paging(request, LIST_BACKFILLS, is_time_and_id)
        book = self._checker.state.requested
        found = sorted((b for b in book.backfills.values()
                        if not request.schedule_id or b.schedule_id == request.schedule_id), key=_listing_key)
        page, last = fill_page(after_key(found, _listing_key, after), size, lambda b: backfill_to_proto(b, book))
        return jobs_pb2.ListBackfillsResponse(backfills=page, next_page_token=next_page_token(LIST_BACKFILLS, last))

    @grpc_errors
    async def CancelBackfill(self, request, context):
        backfill_id = _required_id(request.id, "id")
        self._checker.request(CancelBackfill(backfill_id))
        return backfill_to_proto(self._backfill(backfill_id), self._checker.state.requested)

    def _backfill(self, backfill_id: str) -> Backfill:
        found = self._checker.state.requested.backfills.get(_required_id(backfill_id, "id"))
        if found is None:
            raise NotFound(f"backfill {backfill_id} not found")
        return found

    async def _listed(self, schedule_id: str, keys, start: datetime | None, end: datetime | None,
                      context) -> tuple[backfills.CandidatePartition, ...]:
        schedule = backfills.require_runnable(schedule_id, self._checker.definition(schedule_id))
        trigger = backfills.partition_trigger_of(schedule)
        if len(keys) > MAX_KEY_RANGES:
            raise InvalidArgument("keys", f"{len(keys)} key ranges exceed the limit of {MAX_KEY_RANGES}")
        conditions = []
        for index, key in enumerate(keys):
            if not key.name:
                raise InvalidArgument(f"keys[{index}].name", "must not be empty")
            for part, value in (("name", key.name), ("lower", key.lower), ("upper", key.upper)):
                bounds.check_text(f"keys[{index}].{part}", value, bounds.MAX_KEY_VALUE_BYTES)
            conditions.append(datasets_pb2.KeyCondition(name=key.name, lower=key.lower or None,
                                                        upper=key.upper or None))
        for name, allowed in trigger.filter.items():
            conditions.append(datasets_pb2.KeyCondition(name=name, one_of=list(allowed)))
        metadata = [(k, v) for k, v in context.invocation_metadata() if k in _FORWARDED]
        return await self._partitions.list(trigger.namespace, trigger.dataset,
                                           datasets_pb2.PartitionFilter(keys=conditions), start, end, metadata)


LIST_BACKFILLS = "Jobs.ListBackfills"


def _listing_key(backfill: Backfill) -> tuple[int, str]:
    return epoch_micros(backfill.requested_at), backfill.id


def backfill_to_proto(backfill: Backfill, book: RequestBook) -> jobs_pb2.Backfill:
    running = sorted(run_id for run_id, owner in book.running.items() if owner == backfill.id) if backfill.running else []
    message = jobs_pb2.Backfill(id=backfill.id, schedule_id=backfill.schedule_id, keys=backfill.keys,
                                running_runs=running,
                                requested_at=timestamp_to_proto(backfill.requested_at), total=backfill.total,
                                waiting=backfill.waiting, running=backfill.running, done=backfill.done,
                                failed=backfill.failed, discarded=backfill.discarded)
    for name in ("start", "end", "cancelled_at"):
        if (value := getattr(backfill, name)) is not None:
            getattr(message, name).CopyFrom(timestamp_to_proto(value))
    return message


def _required_id(value: str, field: str) -> str:
    if not value:
        raise InvalidArgument(field, "must not be empty")
    bounds.check_text(field, value, MAX_REQUEST_ID_BYTES)
    return value


def _request_id(value: str) -> str:
    bounds.check_text("request_id", value, MAX_REQUEST_ID_BYTES)
    if not _REQUEST_ID.fullmatch(value):
        raise InvalidArgument("request_id", "letters, digits and . _ : @ / - only")
    return value
