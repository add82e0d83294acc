"""The checker's jobs view is complete up to the log's head when its service has recovered, before
the gRPC server answers: a ListJobs right after a restart lists the jobs the log already holds."""
from __future__ import annotations

from datetime import datetime, timezone

from sluice.clock import SimulatedClock
from sluice.domain import matching
from sluice.eventlog.codec import encode
from sluice.eventlog.port import NO_STREAM
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.v1 import jobs_pb2
from sluice_services.composition import checker_spec

T0 = datetime(2026, 11, 24, tzinfo=timezone.utc)


class Context:
    async def abort(self, code, details):
        raise AssertionError(f"{code}: {details}")


async def test_a_recovered_checker_lists_the_jobs_already_in_the_log(tmp_path):
    log = SqliteEventLog(tmp_path / "events.db")
    try:
        log.append(matching.stream_name("s"), [encode(matching.JobCreated("j1", "s", 1, T0), "c1")], NO_STREAM)
        spec = checker_spec(log, SimulatedClock(T0))
        spec.recover()
        [jobs] = [binding.servicer for binding in spec.grpc if binding.service_name.endswith(".Jobs")]
        listed = await jobs.ListJobs(jobs_pb2.ListJobsRequest(schedule_id="s"), Context())
        assert [(job.id, job.state) for job in listed.jobs] == [("j1", jobs_pb2.PENDING_TRIGGER)]
    finally:
        log.close()
