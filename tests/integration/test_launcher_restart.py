"""Exactly-once launching across launcher restarts, with real subprocesses: the launcher starts a
stand-in for spark-submit (tests/support/stand_in_program.py) through the real submit path and the
supervise wrapper; a "crash" cancels the launcher's tasks and drops it (its programs live on, in
sessions of their own), and a new launcher recovers from the same event log."""
from __future__ import annotations

import asyncio
import os
import signal
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from sluice.bus.port import Record
from sluice.bus.topics import LAUNCH_REQUESTS, PROGRAM_NOTIFICATIONS
from sluice.clock import SimulatedClock
from sluice.domain.common import ProgramRef, RunStatus
from sluice.domain.constraints.facts import WorldFacts
from sluice.domain.jobs import Job, RetryPolicy, TriggerContext
from sluice.domain.runs import MarkCompleted, RequestRun
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.ids import derived_id, run_id_for
from sluice.v1 import jobs_pb2
from sluice.wire.common import notification_from_bytes
from sluice.wire.jobs import job_to_proto
from sluice_services.launcher import supervise
from sluice_services.launcher.programs import SparkConfig, SparkSubmitter
from sluice_services.launcher.service import LauncherService
from tests.support.waiting import until

pytestmark = pytest.mark.integration

PROGRAM = ProgramRef("web", "analytics", "hourly_counts")
STAND_IN = Path(__file__).parents[1] / "support" / "stand_in_program.py"


class Catalog:
    def entry_point(self, program: ProgramRef) -> Path:
        return STAND_IN


class CrashAfterSubmit:
    """Submits for real, then the launcher "dies" before it can record the start."""

    def __init__(self, submitter: SparkSubmitter) -> None:
        self.submitter = submitter

    async def submit(self, entry_point: Path, context_path: Path, log_path: Path,
                     spark_conf: dict[str, str] | None = None):
        await self.submitter.submit(entry_point, context_path, log_path)
        raise asyncio.CancelledError


class World:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.clock = SimulatedClock(datetime(2026, 11, 23, 10, tzinfo=timezone.utc))
        self.log = SqliteEventLog(root / "events.db", clock=self.clock)
        self.gate = root / "gate"
        self.starts = root / "starts.log"
        spark_submit = root / "spark-submit"
        spark_submit.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STAND_IN}" "$@"\n')
        spark_submit.chmod(0o755)
        self.config = SparkConfig(spark_submit=str(spark_submit))
        self.launchers: list[LauncherService] = []

    def launcher(self, submitter=None) -> LauncherService:
        launcher = LauncherService(self.log, self.clock, Catalog(), submitter or SparkSubmitter(self.config, 0.05),
                                   self.root / "data")
        launcher.recover()
        self.launchers.append(launcher)
        return launcher

    def job(self, policy: RetryPolicy = RetryPolicy(), **properties: str) -> Job:
        properties = {"starts_log": str(self.starts), "gate": str(self.gate), **properties}
        return Job(derived_id("job", "1"), "schedule-1", 1, PROGRAM,
                   TriggerContext("schedule-1", "hourly", properties), self.clock.now(), retry_policy=policy)

    async def request(self, launcher: LauncherService, job: Job) -> str:
        message = jobs_pb2.LaunchRequested(job=job_to_proto(job)).SerializeToString()
        await launcher.on_launch_requested(Record(LAUNCH_REQUESTS, 0, 1, b"k", message, (), 0))
        return run_id_for(job.id)

    def starts_of(self, run_id: str) -> list[str]:
        lines = self.starts.read_text().splitlines() if self.starts.exists() else []
        return [line for line in lines if line.startswith(run_id)]

    def events(self, event_type: str) -> list:
        return [r for r in self.log.read_all(0, 10_000) if r.type == event_type]

    def running_for_the_checker(self, launcher: LauncherService, run_id: str) -> int:
        """Runs of the program going, as the checker folds them: reserved at admission, then the statuses."""
        facts = WorldFacts().reserve(PROGRAM, run_id, self.clock.now())
        for record in self.log.read_all(0, 10_000):
            for out in launcher.route(record):
                if out.topic == PROGRAM_NOTIFICATIONS:
                    notification = notification_from_bytes(out.value)
                    facts = facts.observe(PROGRAM, notification.payload.run_id, notification.payload.status,
                                          notification.time)
        return facts.running(PROGRAM)

    def statuses(self, launcher: LauncherService) -> list[str]:
        """The program statuses the launcher reports to the checker (and program-status triggers)."""
        return [notification_from_bytes(o.value).payload.status.value
                for r in self.log.read_all(0, 10_000) for o in launcher.route(r) if o.topic == PROGRAM_NOTIFICATIONS]


async def crash(launcher: LauncherService) -> None:
    tasks = list(launcher._tasks)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


@pytest.fixture
def world(tmp_path: Path):
    w = World(tmp_path)
    yield w
    for launcher in w.launchers:  # programs a failed test left waiting at their gate end now
        for run in launcher.runs():
            spawned = (tmp_path / "runs" / run.id / supervise.SPAWNED)
            if spawned.exists():
                try:
                    os.killpg(int(spawned.read_text().split()[0]), signal.SIGKILL)
                except ProcessLookupError:
                    pass
    w.log.close()


async def test_a_run_going_when_the_launcher_restarts_is_re_attached_and_published_once(world: World):
    first = world.launcher()
    run_id = await world.request(first, world.job())
    await until(lambda: world.starts_of(run_id), "the program to start")
    await crash(first)
    assert first.get(run_id).status is RunStatus.RUNNING

    second = world.launcher()
    second.resume()
    await asyncio.sleep(0.1)
    assert second.get(run_id).status is RunStatus.RUNNING, "re-attached, waiting for the live program"
    world.gate.touch()
    await second.drain()

    run = second.get(run_id)
    assert run.status is RunStatus.COMPLETED, run.error
    assert len(world.starts_of(run_id)) == 1
    assert [len(world.events(t)) for t in ("RunRequested", "RunStarted", "RunCompleted")] == [1, 1, 1]
    assert [o.partition.location for o in run.outputs] == [str(world.root / "data" / "web" / "counts" / "hour=1")]
    assert (world.root / "data" / "web" / "counts" / "hour=1" / "part-0.json").is_file()
    assert world.statuses(second) == ["RUNNING", "COMPLETED"]


async def test_a_program_that_ended_while_the_launcher_was_down_is_taken_with_its_exit_code_and_outputs(world: World):
    first = world.launcher()
    run_id = await world.request(first, world.job())
    await until(lambda: world.starts_of(run_id), "the program to start")
    await crash(first)
    world.gate.touch()
    await until(lambda: (world.root / "runs" / run_id / supervise.EXIT_CODE).exists(), "the program to end")

    second = world.launcher()
    second.resume()
    await second.drain()
    run = second.get(run_id)
    assert run.status is RunStatus.COMPLETED, run.error
    assert len(run.outputs) == 1 and len(world.starts_of(run_id)) == 1


async def test_a_program_killed_while_the_launcher_was_down_is_lost_then_retried_per_policy(world: World):
    first = world.launcher()
    run_id = await world.request(first, world.job(RetryPolicy(max_retries=1, delay_seconds=30)))
    await until(lambda: world.starts_of(run_id), "the program to start")
    await crash(first)
    wrapper = int((world.root / "runs" / run_id / supervise.SPAWNED).read_text().split()[0])
    os.killpg(wrapper, signal.SIGKILL)  # the wrapper and the program, without an exit code
    await until(lambda: _gone(wrapper), "the kill")

    second = world.launcher()
    second.resume()
    await second.drain()
    run = second.get(run_id)
    assert run.status is RunStatus.STARTING and [a.status for a in run.attempts] == [RunStatus.LOST, RunStatus.STARTING]
    assert "ended without an exit status" in run.attempts[0].error
    assert second.next_wake_at() == world.clock.now() + timedelta(seconds=30)
    second.fire_due()
    assert not second._tasks, "the retry is not due yet"

    world.gate.touch()
    world.clock.advance(timedelta(seconds=30))
    third = world.launcher()  # restarted while the retry waited: it is started once, when due
    third.resume()
    await third.drain()
    run = third.get(run_id)
    assert [a.status for a in run.attempts] == [RunStatus.LOST, RunStatus.COMPLETED], run.error
    assert [line.split()[1] for line in world.starts_of(run_id)] == ["1", "2"]


async def test_what_a_killed_wrapper_left_running_is_killed_before_the_retry(world: World):
    launcher = world.launcher()
    run_id = await world.request(launcher, world.job(RetryPolicy(max_retries=1, delay_seconds=0)))
    (line,) = await until(lambda: world.starts_of(run_id), "the program to start")
    await crash(launcher)
    wrapper = int((world.root / "runs" / run_id / supervise.SPAWNED).read_text().split()[0])
    os.kill(wrapper, signal.SIGKILL)  # the wrapper only: its program goes on, orphaned
    await until(lambda: not Path(f"/proc/{wrapper}").exists(), "the wrapper to be reaped")
    orphan = int(line.split()[2])
    assert Path(f"/proc/{orphan}").exists()

    launcher = world.launcher()
    launcher.resume()
    await launcher.drain()
    assert launcher.get(run_id).attempts[0].status is RunStatus.LOST
    await until(lambda: _gone(orphan), "the orphaned program to be killed")


def kill_program(world: World, run_id: str) -> None:
    """The wrapper of the run's first attempt and its program, as if the machine had killed them."""
    os.killpg(int((world.root / "runs" / run_id / supervise.SPAWNED).read_text().split()[0]), signal.SIGKILL)


async def test_a_lost_retry_that_completes_reports_the_run_once_to_the_checker(world: World):
    policy = RetryPolicy(max_retries=2, delay_seconds=10)
    launcher = world.launcher()
    run_id = await world.request(launcher, world.job(policy))
    await until(lambda: world.starts_of(run_id), "the program to start")
    await crash(launcher)
    kill_program(world, run_id)

    launcher = world.launcher()
    launcher.resume()
    await launcher.drain()
    assert launcher.get(run_id).attempts[0].status is RunStatus.LOST
    assert world.running_for_the_checker(launcher, run_id) == 1, "the slot stays taken while the retry waits"
    world.gate.touch()
    world.clock.advance(timedelta(seconds=10))
    launcher.fire_due()
    await launcher.drain()

    run = launcher.get(run_id)
    assert run.status is RunStatus.COMPLETED, run.error
    assert [a.status for a in run.attempts] == [RunStatus.LOST, RunStatus.COMPLETED]
    assert (world.root / "runs" / run_id / "attempt-2" / "context.json").is_file()
    assert world.statuses(launcher) == ["RUNNING", "COMPLETED"], "one RUNNING and one end: the checker counts it once"
    assert world.running_for_the_checker(launcher, run_id) == 0


async def test_a_lost_run_without_retries_left_ends_lost(world: World):
    launcher = world.launcher()
    run_id = await world.request(launcher, world.job(RetryPolicy(max_retries=0)))
    await until(lambda: world.starts_of(run_id), "the program to start")
    await crash(launcher)
    kill_program(world, run_id)
    launcher = world.launcher()
    launcher.resume()
    await launcher.drain()
    assert launcher.get(run_id).status is RunStatus.LOST
    assert world.statuses(launcher) == ["RUNNING", "LOST"]


async def test_a_failed_attempt_is_retried_when_the_policy_says_so(world: World):
    world.gate.touch()
    launcher = world.launcher()
    run_id = await world.request(launcher, world.job(RetryPolicy(max_retries=2, delay_seconds=5, retry_failed=True),
                                                     fail_attempts="1"))
    await launcher.drain()
    world.clock.advance(timedelta(seconds=5))
    launcher.fire_due()
    await launcher.drain()
    run = launcher.get(run_id)
    assert [a.status for a in run.attempts] == [RunStatus.FAILED, RunStatus.COMPLETED], run.error
    assert "exit code 1" in run.attempts[0].error


async def test_a_crash_between_the_recorded_intent_and_the_spawn_launches_once(world: World):
    world.gate.touch()
    first = world.launcher()
    job = world.job()
    first._decide(run_id_for(job.id), RequestRun(job))  # recorded; the launcher dies before starting it
    second = world.launcher()
    second.resume()
    await second.drain()
    assert second.get(run_id_for(job.id)).status is RunStatus.COMPLETED
    assert len(world.starts_of(run_id_for(job.id))) == 1


async def test_a_crash_between_the_spawn_and_recording_it_launches_once(world: World):
    first = world.launcher(CrashAfterSubmit(SparkSubmitter(world.config, 0.05)))
    run_id = await world.request(first, world.job())
    await first.drain()
    assert first.get(run_id).status is RunStatus.STARTING, "the start was never recorded"

    second = world.launcher()  # at once: the first wrapper may not even have claimed the attempt yet
    second.resume()
    await until(lambda: world.starts_of(run_id), "the program to start")
    world.gate.touch()
    await second.drain()
    run = second.get(run_id)
    assert run.status is RunStatus.COMPLETED, run.error
    await asyncio.sleep(0.3)  # a second copy, had one been started, would have said so by now
    assert len(world.starts_of(run_id)) == 1
    assert len(world.events("RunStarted")) == 1 and len(run.outputs) == 1


async def test_a_crash_right_after_recording_the_start_finds_the_wrapper_before_it_claimed(world: World):
    first = world.launcher()
    run_id = await world.request(first, world.job())
    while first.get(run_id).status is not RunStatus.RUNNING:
        await asyncio.sleep(0)
    await crash(first)  # the wrapper is still starting Python: no `spawned` yet
    second = world.launcher()
    second.resume()
    world.gate.touch()
    await second.drain()
    run = second.get(run_id)
    assert run.status is RunStatus.COMPLETED, run.error
    assert len(run.attempts) == 1 and len(world.starts_of(run_id)) == 1


def test_two_wrappers_for_one_attempt_start_the_program_once(tmp_path: Path):
    import subprocess
    marker = tmp_path / "ran"
    command = [sys.executable, "-I", "-S", str(Path(supervise.__file__)), str(tmp_path), "--",
               "sh", "-c", f"echo x >> {marker}; sleep 0.2"]
    wrappers = [subprocess.Popen(command) for _ in range(4)]
    codes = sorted(w.wait(timeout=20) for w in wrappers)
    assert codes == [0, supervise.CLAIMED, supervise.CLAIMED, supervise.CLAIMED]
    assert marker.read_text() == "x\n"
    assert (tmp_path / supervise.EXIT_CODE).read_text() == "0\n"


def _gone(pid: int) -> bool:
    """Ended: no such process, or a zombie (the crashed launcher's event loop has not reaped it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


async def test_a_crash_after_publishing_but_before_recording_the_completion_completes_the_run_once(world: World):
    world.gate.touch()
    first = world.launcher()
    recorded = first._decide

    def dies_before_completing(run_id: str, command: object):
        if isinstance(command, MarkCompleted):
            raise asyncio.CancelledError
        return recorded(run_id, command)
    first._decide = dies_before_completing
    run_id = await world.request(first, world.job())
    await first.drain()
    published = world.root / "data" / "web" / "counts" / "hour=1" / "part-0.json"
    assert first.get(run_id).status is RunStatus.RUNNING and published.is_file()

    second = world.launcher()
    second.resume()
    await second.drain()
    run = second.get(run_id)
    assert run.status is RunStatus.COMPLETED, run.error
    assert [o.partition.location for o in run.outputs] == [str(published.parent)]
    assert len(world.starts_of(run_id)) == 1 and len(world.events("RunCompleted")) == 1


SPARK_PROGRAM = '''
import json, sys, time
from pathlib import Path
from pyspark.sql import SparkSession

context = json.loads(Path(sys.argv[sys.argv.index("--sluice-context") + 1]).read_text())
spark = SparkSession.builder.appName("reattached").getOrCreate()
rows = spark.range(100).count()
gate = Path(context["properties"]["gate"])
while not gate.exists():
    time.sleep(0.05)
Path(context["system"]["result_path"]).write_text(json.dumps({"outputs": [], "inputs": [], "metrics": {"rows": rows}}))
spark.stop()
'''


@pytest.mark.slow
async def test_a_real_spark_submit_outlives_the_launcher_and_is_re_attached(world: World, tmp_path: Path):
    program = tmp_path / "reattached.py"
    program.write_text(SPARK_PROGRAM)

    class SparkCatalog:
        def entry_point(self, ref: ProgramRef) -> Path:
            return program

    def launcher() -> LauncherService:
        started = LauncherService(world.log, world.clock, SparkCatalog(), SparkSubmitter(), tmp_path / "data")
        started.recover()
        world.launchers.append(started)
        return started

    first = launcher()
    run_id = await world.request(first, world.job())
    await until(lambda: first.get(run_id).status is RunStatus.RUNNING, "spark-submit to start")
    await crash(first)
    second = launcher()
    second.resume()
    world.gate.touch()
    await asyncio.wait_for(second.drain(), timeout=300)
    run = second.get(run_id)
    assert run.status is RunStatus.COMPLETED, run.error
    assert len(run.attempts) == 1 and len(world.events("RunStarted")) == 1
