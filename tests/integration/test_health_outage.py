"""Health answers NOT_SERVING while PostgreSQL is down and SERVING again after (issue 25): a real
`sluice standalone` on a real PostgreSQL event log, the server stopped and started again under it.
/healthz (alive) stays 200 throughout, /readyz (ready) is 503 while the log is unreachable, and the
same process goes on working after: a schedule created and a notification handled."""
from __future__ import annotations

import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, TypeVar

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from psycopg.conninfo import conninfo_to_dict

from sluice.client import SluiceClient
from sluice.domain.common import PartitionRef
from sluice.v1 import jobs_pb2
from sluice.v1 import notifications_pb2 as npb
from sluice.v1 import schedules_pb2 as spb
from sluice_services.localserver import LocalServer
from tests.support.postgres import PostgresServer

pytestmark = pytest.mark.integration

T = TypeVar("T")
NAMESPACE = "experiments"
SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING
SERVICES = ("", "sluice.v1.ScheduleRegistry", "sluice.v1.Jobs")


def postgres_url(dsn: str) -> str:
    parts = conninfo_to_dict(dsn)
    return f"postgresql://{parts['user']}@{parts['host']}:{parts['port']}/{parts['dbname']}?connect_timeout=2"


def schedule(name: str) -> spb.Schedule:
    """Triggered by one clickstream partition, then waits an hour (no program is started)."""
    return spb.Schedule(
        name=name, enabled=True,
        program=npb.ProgramRef(namespace=NAMESPACE, app="clickstream", program="hourly_metrics"),
        trigger=spb.Trigger(partition=spb.PartitionTrigger(namespace=NAMESPACE, dataset="clickstream", count=1)),
        constraints=[spb.Constraint(delay=spb.DelayConstraint(seconds=3600))])


def statuses(address: str) -> set[int]:
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return {stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=5).status for name in SERVICES}


def http(address: str, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://{address}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def within(seconds: float, probe: Callable[[], T], what: str) -> T:
    deadline = time.monotonic() + seconds
    while True:
        if result := probe():
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        time.sleep(0.2)


def test_health_answers_not_serving_while_postgresql_is_down_and_serving_again_after(tmp_path: Path) -> None:
    with PostgresServer() as postgres:
        url = postgres_url(postgres.create_database())
        with LocalServer(tmp_path / "sluice", args=["--metrics-port", "0", "--event-log", url]) as server, \
                SluiceClient(server.address) as client:
            assert statuses(server.address) == {SERVING}
            assert http(server.metrics_address, "/readyz") == (200, "ready")
            assert http(server.metrics_address, "/healthz") == (200, "ok")
            before = client.create_schedule(schedule("before_the_outage"))
            client.publish_partitions(NAMESPACE, "clickstream", [PartitionRef({"hour": "08"}, "/data/08")])
            within(30, lambda: [job for job in client.list_jobs() if job.schedule_id == before.id
                                and job.state == jobs_pb2.PENDING_CONSTRAINT and job.waiting_on],
                   "a job of the schedule created before the outage, waiting")  # all handled what they were sent

            postgres.halt()
            stopped = time.monotonic()
            within(10, lambda: statuses(server.address) == {NOT_SERVING}, "every service NOT_SERVING")
            noticed = time.monotonic() - stopped
            status, reason = within(5, lambda: (r := http(server.metrics_address, "/readyz"))[0] == 503 and r,
                                    "/readyz 503")
            assert "event log unreachable" in reason
            time.sleep(3)  # down for a while: still alive, still not ready, still running
            assert http(server.metrics_address, "/healthz") == (200, "ok")
            assert statuses(server.address) == {NOT_SERVING}
            assert server.process.poll() is None

            postgres.resume()
            resumed = time.monotonic()
            within(30, lambda: statuses(server.address) == {SERVING}, "every service SERVING again")
            recovered = time.monotonic() - resumed
            assert http(server.metrics_address, "/readyz") == (200, "ready")

            created = client.create_schedule(schedule("after_the_outage"))
            client.publish_partitions(NAMESPACE, "clickstream", [PartitionRef({"hour": "09"}, "/data/09")])
            jobs = within(30, lambda: [job for job in client.list_jobs() if job.schedule_id == created.id],
                          "a job of the schedule created after the outage")
            assert len(jobs) == 1
            assert len([job for job in client.list_jobs() if job.schedule_id == before.id]) == 2  # "09" too
            assert {schedule.name for schedule in client.list_schedules()} == {"before_the_outage", "after_the_outage"}
            assert server.process.poll() is None, "the same process, not restarted"
    print(f"NOT_SERVING {noticed:.1f} s after PostgreSQL stopped, SERVING {recovered:.1f} s after it started")
