"""The launcher keeps in memory every run not ended and each schedule's newest ended runs
(runs_history); the log keeps them all: an older run is still found by id, a launch request sent
again for it starts nothing and does not bring it back, and a restarted launcher keeps the same runs."""
from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from sluice.bus.port import Record
from sluice.bus.topics import LAUNCH_REQUESTS
from sluice.clock import SimulatedClock
from sluice.domain.common import ProgramRef, RunStatus
from sluice.domain.jobs import Job, TriggerContext
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.ids import derived_id, run_id_for
from sluice.v1 import jobs_pb2
from sluice.wire.jobs import job_to_proto
from sluice_services.launcher.programs import SparkConfig, SparkSubmitter
from sluice_services.launcher.service import LauncherService

pytestmark = pytest.mark.integration

PROGRAM = ProgramRef("web", "analytics", "not_deployed")
HISTORY = 3


class NothingDeployed:
    def entry_point(self, program: ProgramRef) -> Path | None:
        return None  # every run ends FAILED at once: "not deployed"


@pytest.fixture
def world(tmp_path):
    clock = SimulatedClock(datetime(2026, 11, 24, 9, tzinfo=timezone.utc))
    log = SqliteEventLog(tmp_path / "events.db", clock=clock)

    def launcher(history: int | None = HISTORY) -> LauncherService:
        started = LauncherService(log, clock, NothingDeployed(), SparkSubmitter(SparkConfig()), tmp_path / "data",
                                  runs_history=history)
        started.recover()
        return started
    yield clock, log, launcher
    log.close()


async def request(launcher: LauncherService, job: Job) -> str:
    message = jobs_pb2.LaunchRequested(job=job_to_proto(job)).SerializeToString()
    await launcher.on_launch_requested(Record(LAUNCH_REQUESTS, 0, 1, b"k", message, (), 0))
    await launcher.drain()
    return run_id_for(job.id)


async def run_jobs(clock: SimulatedClock, launcher: LauncherService, schedule_id: str, count: int) -> list[Job]:
    jobs = []
    for n in range(count):
        clock.advance(timedelta(minutes=1))
        jobs.append(Job(derived_id("job", schedule_id, str(n)), schedule_id, 1, PROGRAM, TriggerContext(schedule_id, "s", {}),
                        clock.now()))
        await request(launcher, jobs[-1])
    return jobs


async def test_each_schedule_keeps_its_newest_ended_runs_and_the_log_all(world):
    clock, log, start = world
    launcher = start()
    a_jobs = await run_jobs(clock, launcher, "schedule-a", 5)
    b_jobs = await run_jobs(clock, launcher, "schedule-b", 2)
    a_runs = [run_id_for(job.id) for job in a_jobs]
    assert [run.id for run in launcher.runs("schedule-a")] == a_runs[2:]
    assert [run.id for run in launcher.runs()] == a_runs[2:] + [run_id_for(job.id) for job in b_jobs]
    assert all(run.status is RunStatus.FAILED for run in launcher.runs())
    assert len(launcher._store.states()) == 5  # what the launcher holds in memory

    oldest = launcher.get(a_runs[0])
    assert oldest is not None and oldest.status is RunStatus.FAILED  # read from the log

    head = log.head_position()
    assert await request(launcher, a_jobs[0]) == a_runs[0]  # the same launch request, sent again
    assert log.head_position() == head  # no second run
    assert len(launcher._store.states()) == 5 and [r.id for r in launcher.runs("schedule-a")] == a_runs[2:]


async def test_a_restarted_launcher_keeps_the_same_runs_and_a_larger_history_more(world):
    clock, _, launcher = world
    first = launcher()
    a_runs = [run_id_for(job.id) for job in await run_jobs(clock, first, "schedule-a", 5)]
    assert [run.id for run in launcher().runs()] == a_runs[2:]
    assert [run.id for run in launcher(10).runs()] == a_runs
    assert [run.id for run in launcher(None).runs()] == a_runs


async def test_a_launcher_restored_from_a_snapshot_keeps_the_same_runs(world):
    clock, log, launcher = world
    first = launcher()
    a_runs = [run_id_for(job.id) for job in await run_jobs(clock, first, "schedule-a", 5)]
    first._store.snapshot()  # as one is saved every few thousand events
    restored = launcher()
    assert [run.id for run in restored.runs()] == a_runs[2:]
    assert len(restored._store.states()) == HISTORY
    assert restored.get(a_runs[0]).status is RunStatus.FAILED



async def test_sluice_rebuild_launcher_keeps_the_history_of_the_launchers_own_configuration(world, tmp_path):
    """`sluice rebuild launcher` reads [services.launcher] as `sluice serve launcher` does; --service another section."""
    clock, log, start = world
    launcher = start(history=None)
    for schedule_id in ("schedule-a", "schedule-b"):
        await run_jobs(clock, launcher, schedule_id, 4)
    config = tmp_path / "sluice.toml"
    config.write_text("[sluice]\nruns_history = 3\n\n[services.launcher]\nruns_history = 1\n", encoding="utf-8")
    kept = {}
    for section in ((), ("--service", "standalone")):
        rebuilt = subprocess.run([sys.executable, "-m", "sluice_services.cli", "--json", "rebuild", "launcher",
                                  "--data-dir", str(tmp_path), "--config", str(config), *section],
                                 capture_output=True, text=True, timeout=120)
        assert rebuilt.returncode == 0, rebuilt.stderr
        kept[section] = json.loads(rebuilt.stdout)[0]["entities"]
    assert kept == {(): 2, ("--service", "standalone"): 6}
