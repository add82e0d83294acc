"""A synchronous client of Sluice's gRPC API, for producers, the CLI and tests."""
from __future__ import annotations

import os
import uuid
from collections import namedtuple
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import grpc

from sluice.domain.common import Notification, PartitionCommitted, PartitionRef
from sluice.v1 import (
    jobs_pb2,
    jobs_pb2_grpc,
    lineage_pb2,
    lineage_pb2_grpc,
    notifications_pb2,
    notifications_pb2_grpc,
    runs_pb2,
    runs_pb2_grpc,
    schedules_pb2,
    schedules_pb2_grpc,
)
from sluice.wire.common import notification_to_proto

DEFAULT_SERVER = "127.0.0.1:50051"
LINEAGE_PAGE = 1_000
"""Runs or jobs per ListRuns / ListJobs page: well under gRPC's 4 MB message limit, also for runs with many datasets."""


def default_server() -> str:
    return os.environ.get("SLUICE_SERVER", DEFAULT_SERVER)


class SluiceClient:
    """`token`: the bearer token a server started with --grpc-token asks for (default: SLUICE_TOKEN).
    `tls`: speak TLS, trusting the system's certificate authorities, or `tls_ca`'s (a PEM file,
    default SLUICE_TLS_CA; giving one implies TLS). `client_cert` and `client_key` (PEM files,
    default SLUICE_CLIENT_CERT, SLUICE_CLIENT_KEY): the certificate a server with a client CA asks for."""

    def __init__(self, target: str | None = None, timeout: float = 10.0, *, token: str | None = None,
                 tls: bool = False, tls_ca: str | os.PathLike | None = None,
                 client_cert: str | os.PathLike | None = None, client_key: str | os.PathLike | None = None) -> None:
        self.target = target or default_server()
        token = os.environ.get("SLUICE_TOKEN", "") if token is None else token
        tls_ca = tls_ca or os.environ.get("SLUICE_TLS_CA") or None
        client_cert = client_cert or os.environ.get("SLUICE_CLIENT_CERT") or None
        client_key = client_key or os.environ.get("SLUICE_CLIENT_KEY") or None
        if tls or tls_ca or client_cert:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read(tls_ca), private_key=_read(client_key), certificate_chain=_read(client_cert))
            self._channel = grpc.secure_channel(self.target, credentials)
        else:
            self._channel = grpc.insecure_channel(self.target)
        self.channel = grpc.intercept_channel(self._channel, _BearerToken(token)) if token else self._channel
        """Every call through it carries the token: stubs of other services (datasets) use it too."""
        self._timeout = timeout
        self.schedules = schedules_pb2_grpc.ScheduleRegistryStub(self.channel)
        self.notifications = notifications_pb2_grpc.NotificationsStub(self.channel)
        self.jobs = jobs_pb2_grpc.JobsStub(self.channel)
        self.runs = runs_pb2_grpc.RunsStub(self.channel)
        self.lineage = lineage_pb2_grpc.LineageStub(self.channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "SluiceClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wait_ready(self, timeout: float = 30.0) -> None:
        grpc.channel_ready_future(self._channel).result(timeout=timeout)

    def create_schedule(self, schedule: schedules_pb2.Schedule) -> schedules_pb2.Schedule:
        return self.schedules.CreateSchedule(schedules_pb2.CreateScheduleRequest(schedule=schedule), timeout=self._timeout)

    def list_schedules(self, namespace: str = "", app: str = "") -> list[schedules_pb2.Schedule]:
        """Every schedule, page after page (ListSchedules is paged)."""
        found: list[schedules_pb2.Schedule] = []
        token = ""
        while True:
            request = schedules_pb2.ListSchedulesRequest(namespace=namespace, app=app, page_token=token)
            answer = self.schedules.ListSchedules(request, timeout=self._timeout)
            found.extend(answer.schedules)
            token = answer.next_page_token
            if not token:
                return found

    def publish(self, notification: notifications_pb2.Notification) -> str:
        request = notifications_pb2.PublishNotificationRequest(notification=notification)
        return self.notifications.Publish(request, timeout=self._timeout).id

    def publish_partitions(self, namespace: str, dataset: str, partitions: Iterable[PartitionRef],
                           notification_id: str | None = None) -> str:
        """Announce one committed transaction of a dataset: the partitions it added."""
        notification = Notification(notification_id or str(uuid.uuid4()), datetime.now(timezone.utc),
                                    PartitionCommitted(namespace, dataset, tuple(partitions)))
        return self.publish(notification_to_proto(notification))

    def list_jobs(self, schedule_id: str = "", pending_only: bool = False) -> list[jobs_pb2.Job]:
        """Every matching job (every page), oldest first."""
        return self._every_page(self.jobs.ListJobs, "jobs", lambda token: jobs_pb2.ListJobsRequest(
            schedule_id=schedule_id, pending_only=pending_only, page_token=token))

    def list_runs(self, schedule_id: str = "") -> list[runs_pb2.Run]:
        """Every run (of the schedule, when given; every page), oldest first."""
        return self._every_page(self.runs.ListRuns, "runs", lambda token: runs_pb2.ListRunsRequest(
            schedule_id=schedule_id, page_token=token))

    def list_backfills(self, schedule_id: str = "") -> list[jobs_pb2.Backfill]:
        """Every backfill (of the schedule, when given; every page), oldest first."""
        return self._every_page(self.jobs.ListBackfills, "backfills", lambda token: jobs_pb2.ListBackfillsRequest(
            schedule_id=schedule_id, page_token=token))

    def get_run(self, run_id: str) -> runs_pb2.Run:
        return self.runs.GetRun(runs_pb2.GetRunRequest(id=run_id), timeout=self._timeout)

    def lineage_jobs(self, namespace: str = "") -> list[lineage_pb2.LineageJob]:
        """Every job (every page), by namespace then fully qualified name."""
        return self._every_page(self.lineage.ListJobs, "jobs", lambda token: lineage_pb2.ListLineageJobsRequest(
            namespace=namespace, page_size=LINEAGE_PAGE, page_token=token))

    def lineage_runs(self, job_namespace: str = "", job_name: str = "", parent_run_id: str = "") -> list[lineage_pb2.LineageRun]:
        """Every matching run (every page), oldest first."""
        return self._every_page(self.lineage.ListRuns, "runs", lambda token: lineage_pb2.ListLineageRunsRequest(
            job_namespace=job_namespace, job_name=job_name, parent_run_id=parent_run_id, page_size=LINEAGE_PAGE,
            page_token=token))

    def _every_page(self, call: Callable[..., Any], field: str, request_for: Callable[[str], Any]) -> list[Any]:
        """The items (`field`) of every page of a paged listing, the first page's request_for("") on."""
        items, token = [], ""
        while True:
            response = call(request_for(token), timeout=self._timeout)
            items.extend(getattr(response, field))
            if not (token := response.next_page_token):
                return items


def parse_pairs(pairs: Iterable[str], what: str) -> Mapping[str, str]:
    """k=v strings to a dict; ValueError names what was malformed."""
    result = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{what}: expected KEY=VALUE, got {pair!r}")
        result[key.strip()] = value.strip()
    return result


def _read(path: str | os.PathLike | None) -> bytes | None:
    return Path(path).read_bytes() if path else None


class _CallDetails(namedtuple("_CallDetails", ("method", "timeout", "metadata", "credentials", "wait_for_ready",
                                               "compression")), grpc.ClientCallDetails):
    pass


class _BearerToken(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Adds `authorization: Bearer <token>` to every call (unary, and server-streaming: Runs.StreamRunLog)."""

    def __init__(self, token: str) -> None:
        self._header = ("authorization", f"Bearer {token}")

    def intercept_unary_unary(self, continuation: Callable, details: grpc.ClientCallDetails, request: Any) -> Any:
        metadata = (*(details.metadata or ()), self._header)
        return continuation(_CallDetails(details.method, details.timeout, metadata, details.credentials,
                                         details.wait_for_ready, details.compression), request)

    intercept_unary_stream = intercept_unary_unary
