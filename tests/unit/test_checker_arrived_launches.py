"""The checker's route sends a job admitted as it arrived as the Job message it arrived in
(sluice_services.checker.arrived): the same bytes as the route decoding the JobsAdmitted from the
log, which a restarted checker (or a joined job) still does."""
from __future__ import annotations

from datetime import datetime, timezone

from sluice.bus.port import Record
from sluice.bus.topics import JOBS
from sluice.clock import SimulatedClock
from sluice.domain.checking import QUEUE_STREAM, JobAdmitted, JobsAdmitted
from sluice.domain.common import Notification, PartitionCommitted, PartitionRef, ProgramRef
from sluice.domain.constraints import DelayConstraint
from sluice.domain.jobs import Job, RetryPolicy, TriggerContext, WaitingJobPolicy
from sluice.eventlog.codec import encode
from sluice.eventlog.port import NO_STREAM, StreamAppend
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.v1 import jobs_pb2
from sluice.wire.jobs import job_to_proto
from sluice_services.checker.arrived import KEPT_BYTES, LAUNCH_OVERHEAD, ArrivedJobs
from sluice_services.checker.service import CheckerService

T0 = datetime(2026, 11, 24, tzinfo=timezone.utc)
P = ProgramRef("ns", "app", "p")


def triggered(index: int, *constraints, notifications=(), logical_time=T0) -> Record:
    schedule = f"s{index}"
    job = Job(f"{schedule}-j1", schedule, 1, P, TriggerContext(schedule, schedule, {"k": "v"}, notifications,
                                                               logical_time),
              T0, 3, constraints, 30, sequence=1, triggered_at=T0, retry_policy=RetryPolicy(1, 5, 1.0, True),
              waiting_job_policy=WaitingJobPolicy.SEPARATE, spark_conf={"spark.x": "1"}, max_run_seconds=60)
    value = jobs_pb2.JobTriggered(job=job_to_proto(job)).SerializeToString()
    return Record(JOBS, 0, index, schedule.encode(), value, (), 0)


def launches(checker: CheckerService, log: SqliteEventLog) -> list[tuple[str, bytes]]:
    return [(o.key, o.value) for event in log.read_stream(QUEUE_STREAM) for o in checker.route(event)]


async def test_jobs_admitted_on_arrival_launch_with_the_bytes_the_logged_event_gives():
    log, clock = SqliteEventLog(), SimulatedClock(T0)
    checker = CheckerService(log, clock)
    checker.recover()
    notification = Notification("n1", T0, PartitionCommitted("ns", "d", (PartitionRef({"day": "1"}, "/d/day=1"),)))
    records = [triggered(0), triggered(1, notifications=(notification,), logical_time=None), triggered(2)]
    await checker.apply([(record, checker.parse_job_triggered(record)) for record in records])

    sent = launches(checker, log)
    restarted = CheckerService(log, clock)  # nothing kept: every launch decoded from the log
    assert [key for key, _ in sent] == ["s0-j1", "s1-j1", "s2-j1"]
    assert sent == launches(restarted, log)
    assert sent == launches(checker, log)  # kept until routed once, then decoded again
    log.close()


async def test_an_admission_of_kept_and_unkept_jobs_launches_each_with_the_bytes_the_logged_event_gives():
    log, clock = SqliteEventLog(), SimulatedClock(T0)
    checker = CheckerService(log, clock)
    checker.recover()
    large = Notification("n1", T0, PartitionCommitted("ns", "d", tuple(
        PartitionRef({"day": str(day)}, f"/d/day={day}/" + "x" * 64) for day in range(KEPT_BYTES // 64))))
    records = [triggered(0), triggered(1, notifications=(large,)), triggered(2)]
    await checker.apply([(record, checker.parse_job_triggered(record)) for record in records])
    [admitted] = [event for event in log.read_stream(QUEUE_STREAM) if event.type == "JobsAdmitted"]
    assert [launch is None for launch in checker._arrived.launches_at(admitted.version)] == [False, True, False]

    await checker.apply([(record, checker.parse_job_triggered(record)) for record in
                         [triggered(3), triggered(4, notifications=(large,)), triggered(5)]])
    sent = launches(checker, log)
    assert [key for key, _ in sent] == ["s0-j1", "s1-j1", "s2-j1", "s3-j1", "s4-j1", "s5-j1"]
    assert sent == launches(CheckerService(log, clock), log)
    log.close()


def test_a_log_of_earlier_versions_launches_its_job_admitted_events():
    log, clock = SqliteEventLog(), SimulatedClock(T0)
    job = Job("s0-j1", "s0", 1, P, TriggerContext("s0", "s0"), T0, sequence=1, triggered_at=T0)
    log.append_batch([StreamAppend(QUEUE_STREAM, [encode(JobAdmitted(job, T0), "e1")], NO_STREAM)])
    [(key, value)] = launches(CheckerService(log, clock), log)
    assert key == "s0-j1" and jobs_pb2.LaunchRequested.FromString(value).job == job_to_proto(job)
    log.close()


async def test_a_job_that_waits_first_launches_from_the_logged_event():
    log, clock = SqliteEventLog(), SimulatedClock(T0)
    checker = CheckerService(log, clock)
    checker.recover()
    record = triggered(0, DelayConstraint(30))
    await checker.apply([(record, checker.parse_job_triggered(record))])
    assert launches(checker, log) == []
    clock.set(T0.replace(minute=1))
    assert checker.fire_due()
    [(key, value)] = launches(checker, log)
    assert key == "s0-j1" and value == jobs_pb2.LaunchRequested.FromString(value).SerializeToString()
    assert jobs_pb2.LaunchRequested.FromString(value).job == jobs_pb2.JobTriggered.FromString(record.value).job


def test_a_decision_appended_forgets_the_arrivals_and_keeps_launches_up_to_so_many_bytes():
    jobs = [Job(f"j{i}", f"s{i}", 1, P, TriggerContext(f"s{i}", f"s{i}"), T0) for i in range(3)]
    size = len(jobs_pb2.JobTriggered(job=job_to_proto(jobs[0])).SerializeToString())
    kept = ArrivedJobs(launches_kept_bytes=2 * (size + LAUNCH_OVERHEAD))
    for job in jobs[:2]:
        kept.keep(job, jobs_pb2.JobTriggered(job=job_to_proto(job)).SerializeToString())
    kept.appended([JobsAdmitted((job,), T0) for job in jobs[:2]], last_version=12)  # versions 11 and 12
    kept.keep(jobs[2], jobs_pb2.JobTriggered(job=job_to_proto(jobs[2])).SerializeToString())
    kept.appended([JobsAdmitted((jobs[2],), T0)], last_version=13)
    assert kept.launches_at(11) is None  # the oldest let go
    launches = [launch for v in (12, 13) for launch in kept.launches_at(v)]
    assert [(o.key, jobs_pb2.LaunchRequested.FromString(o.value).job.id) for o in launches] == [("j1", "j1"), ("j2", "j2")]
    assert kept.launches_at(12) is None  # once
    kept.appended([JobsAdmitted((jobs[0],), T0)], last_version=14)
    assert kept.launches_at(14) is None  # its arrival was forgotten with the decision before


def test_a_job_triggered_without_its_id_or_not_protobuf_is_malformed():
    import pytest

    from sluice.runtime.errors import MalformedMessage

    checker = CheckerService(SqliteEventLog(), SimulatedClock(T0))
    nameless = jobs_pb2.JobTriggered(job=jobs_pb2.Job(schedule_id="s0")).SerializeToString()
    for value in (nameless, b"\xff\xff not protobuf"):
        with pytest.raises(MalformedMessage):
            checker.parse_job_triggered(Record(JOBS, 0, 0, b"s0", value, (), 0))


def test_a_message_over_kept_bytes_is_not_kept_and_launches_from_its_event():
    kept = ArrivedJobs()
    job = Job("j0", "s0", 1, P, TriggerContext("s0", "s0", {"k": "v" * (KEPT_BYTES + 1)}), T0)
    kept.keep(job, jobs_pb2.JobTriggered(job=job_to_proto(job)).SerializeToString())
    kept.appended([JobsAdmitted((job,), T0)], last_version=1)
    assert kept.launches_at(1) is None


def test_a_burst_of_launches_routed_after_its_last_decision_is_all_kept():
    kept = ArrivedJobs()
    jobs = [Job(f"j{i}", f"s{i}", 1, P, TriggerContext(f"s{i}", f"s{i}"), T0) for i in range(10_000)]
    for start in range(0, len(jobs), 500):
        for job in jobs[start:start + 500]:
            kept.keep(job, jobs_pb2.JobTriggered(job=job_to_proto(job)).SerializeToString())
        kept.appended([JobsAdmitted(tuple(jobs[start:start + 500]), T0)], last_version=start // 500 + 1)
    assert [launch.key for version in range(1, 21) for launch in kept.launches_at(version)] == [job.id for job in jobs]
