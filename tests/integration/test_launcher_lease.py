"""The launcher lease on a real SQLite log with real program processes (the stand-in through the supervise
wrapper): a live owner's runs are never taken, a launcher that lost the lease appends nothing, a launcher
restarted on the same data dir takes over at once and re-attaches; and one process per service per data
dir, shown with two real `sluice` processes."""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from sluice.bus.port import Record
from sluice.bus.topics import LAUNCH_REQUESTS
from sluice.clock import SimulatedClock
from sluice.datasets.files import read_result
from sluice.domain.commits import sequence_id_for
from sluice.domain.common import ProgramRef, RunStatus
from sluice.domain.jobs import Job, TriggerContext
from sluice.domain.lease import LeaseLost
from sluice.domain.runs import MarkLost
from sluice.eventlog.port import EventLogUnavailable
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.ids import derived_id, run_id_for
from sluice.runtime.errors import MalformedMessage
from sluice.v1 import jobs_pb2
from sluice.wire.jobs import job_to_proto
from sluice_services.launcher import supervise
from sluice_services.launcher.lease import LeaseChange, LeaseKeeper, LeaseTerms
from sluice_services.launcher.programs import SparkConfig, SparkSubmitter
from sluice_services.launcher import service as launcher_service
from sluice_services.launcher.service import LauncherService, NotLeaseHolder
from sluice_services.datasets.service import DatasetsService
from sluice_services.launcher.tracking import exit_code
from sluice_services.localserver import LocalServer
from tests.support.run_data import LocalRunData
from tests.support.waiting import until

pytestmark = pytest.mark.integration

STAND_IN = Path(__file__).parents[1] / "support" / "stand_in_program.py"
TERMS = LeaseTerms(seconds=30, renew_every=10)


class Catalog:
    def entry_point(self, program: ProgramRef) -> Path:
        return STAND_IN


class Hosts:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.clock = SimulatedClock(datetime(2026, 11, 23, 10, tzinfo=timezone.utc))
        spark_submit = root / "spark-submit"
        spark_submit.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STAND_IN}" "$@"\n')
        spark_submit.chmod(0o755)
        self.config = SparkConfig(spark_submit=str(spark_submit))
        self.logs: list[SqliteEventLog] = []
        self.gate = root / "gate"
        self.starts = root / "starts.log"

    def launcher(self, host: str, run_data: LocalRunData | None = None) -> LauncherService:
        log = SqliteEventLog(self.root / "events.db", clock=self.clock)
        self.logs.append(log)
        launcher = LauncherService(log, self.clock, Catalog(), SparkSubmitter(self.config, 0.05),
                                   self.root / host / "data", run_data=run_data,
                                   lease=LeaseKeeper(log, self.clock, host, TERMS))
        launcher.recover()
        launcher.resume()
        return launcher

    def request(self, n: int) -> Record:
        job = Job(derived_id("job", str(n)), "schedule-1", n, ProgramRef("web", "analytics", "hourly_counts"),
                  TriggerContext("schedule-1", "hourly", {"starts_log": str(self.starts), "gate": str(self.gate)}),
                  self.clock.now())
        return Record(LAUNCH_REQUESTS, 0, n, b"k", jobs_pb2.LaunchRequested(job=job_to_proto(job)).SerializeToString(),
                      (), 0)

    def events(self) -> int:
        return len(self.logs[0].read_all(0, 100_000))

    def datasets(self, partitions_dir: Path) -> LocalRunData:
        """One datasets service on the shared log, answering both launchers (in this thread)."""
        log = SqliteEventLog(self.root / "events.db", clock=self.clock)
        self.logs.append(log)
        return LocalRunData(DatasetsService(log, self.clock), partitions_dir)


@pytest.fixture
def hosts(tmp_path: Path):
    h = Hosts(tmp_path)
    yield h
    h.gate.touch()
    for spawned in tmp_path.rglob(supervise.SPAWNED):
        try:
            os.killpg(int(spawned.read_text().split()[0]), signal.SIGKILL)
        except (ProcessLookupError, PermissionError, ValueError):
            pass
    for log in h.logs:
        log.close()


async def test_a_launch_request_whose_job_id_is_no_uuid_is_malformed_and_records_nothing(hosts: Hosts):
    a = hosts.launcher("host-a")
    before = hosts.events()
    message = jobs_pb2.LaunchRequested.FromString(hosts.request(1).value)
    message.job.id = "'; DROP TABLE events;--"
    with pytest.raises(MalformedMessage, match="job.id: must be a UUID"):
        await a.on_launch_requested(Record(LAUNCH_REQUESTS, 0, 1, b"k", message.SerializeToString(), (), 0))
    assert hosts.events() == before


@pytest.mark.parametrize("holding", [True, False], ids=["renewing", "standing-by"])
async def test_a_lease_step_the_log_refuses_is_tried_again_after_a_pause_and_warned_once(
        hosts: Hosts, monkeypatch, caplog, holding: bool):
    """Its step stays due while the log refuses it: retried at once, it spun as fast as the log answered (a
    PostgreSQL refusing connections: thousands of tries and warnings a second)."""
    owner = hosts.launcher("host-a")
    launcher = owner if holding else hosts.launcher("host-b")
    hosts.clock.advance(timedelta(seconds=TERMS.seconds + 1))  # a renewal due, or the lease expired

    def unavailable(*args, **kwargs):
        raise EventLogUnavailable("connection refused")
    for log in hosts.logs:
        monkeypatch.setattr(log, "append", unavailable)
        monkeypatch.setattr(log, "read_stream", unavailable)
    pauses: list[float] = []

    async def sleep(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == 5:
            raise asyncio.CancelledError
    monkeypatch.setattr(launcher_service.asyncio, "sleep", sleep)
    with caplog.at_level(logging.WARNING, logger=launcher_service.__name__), pytest.raises(asyncio.CancelledError):
        await launcher.keep_lease()
    assert pauses == [launcher_service.LEASE_RETRY_SECONDS] * 5
    assert len([r for r in caplog.records if "trying again" in r.getMessage()]) == 1


async def test_a_standby_never_takes_the_runs_of_a_live_launcher(hosts: Hosts):
    a, b = hosts.launcher("host-a"), hosts.launcher("host-b")
    assert a.holds_lease and not b.holds_lease
    await a.on_launch_requested(hosts.request(1))
    run_id = run_id_for(derived_id("job", "1"))
    await until(lambda: a.get(run_id).status is RunStatus.RUNNING, "the run RUNNING")
    with pytest.raises(NotLeaseHolder):
        await b.on_launch_requested(hosts.request(2))
    for _ in range(12):  # two minutes: four lease durations, the owner renewing all along
        hosts.clock.advance(timedelta(seconds=10))
        assert await a.lease_tick() is None
        assert await b.lease_tick() is None
        b.fire_due()
    b.recover()
    assert b.get(run_id).status is RunStatus.RUNNING and run_id_for(derived_id("job", "2")) not in {
        r.id for r in b.runs()}, "the standby recorded nothing, started nothing"
    assert not b._tasks
    hosts.gate.touch()
    await a.drain()
    assert a.get(run_id).status is RunStatus.COMPLETED
    assert len(hosts.starts.read_text().splitlines()) == 1


def gone_or_zombie(pid: int) -> bool:
    """The process has ended (reaped, or a zombie); it may be reaped between any two reads of /proc."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


async def test_a_launcher_whose_lease_was_taken_over_appends_nothing_and_kills_its_program(hosts: Hosts):
    a, b = hosts.launcher("host-a"), hosts.launcher("host-b")
    await a.on_launch_requested(hosts.request(1))
    run_id = run_id_for(derived_id("job", "1"))
    await until(lambda: a.get(run_id).status is RunStatus.RUNNING and hosts.starts.exists(), "the program started")
    wrapper = a.get(run_id).attempt.pid
    hosts.clock.advance(timedelta(seconds=31))  # a is paused past its lease
    assert await b.lease_tick() is LeaseChange.ACQUIRED
    assert b.get(run_id).attempts[0].status is RunStatus.LOST, "another home's attempt: LOST, retried by policy"
    assert "lost the lease" in b.get(run_id).attempts[0].error
    before = hosts.events()
    with pytest.raises(LeaseLost):
        a._decide(run_id, MarkLost("a's own judgment, too late"))
    assert hosts.events() == before, "fenced: nothing appended"
    assert await a.lease_tick() is LeaseChange.LOST
    await until(lambda: gone_or_zombie(wrapper), "the wrapper killed")
    with pytest.raises(NotLeaseHolder):
        await a.on_launch_requested(hosts.request(2))


async def test_a_launcher_restarted_on_the_same_data_dir_takes_over_at_once_and_re_attaches(hosts: Hosts):
    first = hosts.launcher("host-a")
    await first.on_launch_requested(hosts.request(1))
    run_id = run_id_for(derived_id("job", "1"))
    await until(lambda: first.get(run_id).status is RunStatus.RUNNING and hosts.starts.exists(), "the program started")
    for task in list(first._tasks):  # kill -9 of the launcher alone: its program goes on
        task.cancel()
    second = hosts.launcher("host-a")  # same home: its data dir's lock says the first one ended
    assert second.holds_lease and second._lease.epoch == 2
    hosts.gate.touch()
    await until(lambda: second.get(run_id).status.terminal, "the run ended")
    assert second.get(run_id).status is RunStatus.COMPLETED and len(second.get(run_id).attempts) == 1
    assert len(hosts.starts.read_text().splitlines()) == 1


async def test_a_launcher_resuming_after_its_lease_was_taken_over_publishes_nothing(hosts: Hosts):
    run_data = hosts.datasets(hosts.root / "host-a" / "data")
    a = hosts.launcher("host-a", run_data)
    await a.on_launch_requested(hosts.request(1))
    run_id = run_id_for(derived_id("job", "1"))
    await until(lambda: a.get(run_id).status is RunStatus.RUNNING and hosts.starts.exists(), "the program started")
    b = hosts.launcher("host-b", run_data)
    hosts.clock.advance(timedelta(seconds=31))  # a is paused past its lease (its program goes on)
    assert await b.lease_tick() is LeaseChange.ACQUIRED
    await b.drain()  # attempt 1 released at the datasets service, then recorded LOST
    assert [a.status for a in b.get(run_id).attempts] == [RunStatus.LOST, RunStatus.STARTING]
    before = hosts.events()
    hosts.gate.touch()  # a resumes: attempt 1's program exits 0, a asks for its outputs to be published
    await a.drain()
    assert run_data.service.commits.progress(sequence_id_for(run_id)) is None, "no commit sequence recorded"
    assert not (hosts.root / "host-a" / "data" / "web").exists(), "no output moved in place"
    access = run_data.service.access(run_id)
    assert access.attempt == 1 and not access.published and not access.open
    assert hosts.events() == before, "the run's history unchanged: attempt 1 LOST, attempt 2 to come"


async def test_a_new_owner_records_the_completion_of_an_attempt_that_published_before_its_launcher_stopped(
        hosts: Hosts):
    run_data = hosts.datasets(hosts.root / "host-a" / "data")
    a = hosts.launcher("host-a", run_data)
    await a.on_launch_requested(hosts.request(1))
    run_id = run_id_for(derived_id("job", "1"))
    await until(lambda: a.get(run_id).status is RunStatus.RUNNING and hosts.starts.exists(), "the program started")
    attempt_dir = a.attempt_dir(a.get(run_id))
    for task in list(a._tasks):  # a stops where it is; its program goes on
        task.cancel()
    hosts.gate.touch()
    await until(lambda: exit_code(attempt_dir) == 0, "the program ended")
    # a published, and stopped before recording the run's completion
    published = await run_data.publish(run_id, read_result(attempt_dir / "result.json"), attempt=1)
    b = hosts.launcher("host-b", run_data)
    hosts.clock.advance(timedelta(seconds=31))
    assert await b.lease_tick() is LeaseChange.ACQUIRED
    await b.drain()
    run = b.get(run_id)
    assert run.status is RunStatus.COMPLETED and len(run.attempts) == 1 and run.outputs == published
    assert len(hosts.starts.read_text().splitlines()) == 1, "not run again"


@pytest.mark.parametrize("command", [("serve", "launcher"), ("standalone",)])
def test_a_second_process_of_a_service_on_one_data_dir_refuses_to_start(tmp_path: Path, command: tuple[str, ...]):
    told = ["--datasets-address", "127.0.0.1:9"] if command == ("serve", "launcher") else []  # asked only by runs
    with LocalServer(tmp_path / "data", command=command, args=told) as first:
        second = subprocess.run([sys.executable, "-m", "sluice_services.cli", *command, "--data-dir",
                                 str(tmp_path / "data"), "--port", "0", *told], capture_output=True, text=True,
                                timeout=60)
        assert second.returncode == 2, second
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and "already runs on data dir" in lines[0] and str(first.pid) in lines[0], lines
        assert first.process.poll() is None, "the first one serves on"
    with LocalServer(tmp_path / "data", command=command, args=told):  # the lock went with the process
        pass
