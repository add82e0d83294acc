"""Run directories (contexts, driver logs) are deleted once their run ended longer ago than the
retention, by the injected clock, in the launcher's timer pass: never one of a run not ended, of no
run at all, nor anything a link points to. The deleting is done in a thread: the event loop goes on
while it does. The option takes 7d, 12h, 30m or seconds."""
from __future__ import annotations

import asyncio
import shutil
import threading
from datetime import datetime, timedelta, timezone

import pytest

from sluice.clock import SimulatedClock
from sluice.domain import runs
from sluice.domain.common import ProgramRef
from sluice.domain.jobs import Job, TriggerContext
from sluice.eventlog.codec import encode
from sluice.eventlog.port import NO_STREAM
from sluice.eventlog.sqlite import SqliteEventLog
from sluice_services.config import ConfigError, resolve
from sluice_services.launcher.programs import DirectoryCatalog, SparkConfig, SparkSubmitter
from sluice_services.launcher.run_control import RunDirSweeper
from sluice_services.launcher.service import LauncherService

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
PROGRAM = ProgramRef("ops", "etl", "daily")


def record(log: SqliteEventLog, run_id: str, ended_at: datetime | None) -> None:
    job = Job(f"job-{run_id}", "schedule-1", 1, PROGRAM, TriggerContext("schedule-1", "daily"), T0)
    events = [runs.RunRequested(run_id, job, T0)]
    if ended_at is not None:
        events.append(runs.RunFailed(run_id, "exit code 1", ended_at))
    log.append(runs.stream_name(run_id), [encode(e, f"{run_id}-{n}") for n, e in enumerate(events)], NO_STREAM)


@pytest.fixture
def clock():
    return SimulatedClock(T0)


@pytest.fixture
def log(tmp_path, clock):
    events = SqliteEventLog(tmp_path / "events.db", clock=clock)
    yield events
    events.close()


@pytest.fixture
def world(tmp_path, clock, log):
    record(log, "old", T0 + timedelta(days=1))
    record(log, "recent", T0 + timedelta(days=6))
    record(log, "going", None)
    runs_root = tmp_path / "runs"
    for name in ("old", "recent", "going", "not-a-run"):
        (runs_root / name / "attempt-2").mkdir(parents=True)
        (runs_root / name / "driver.log").write_text("log\n")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    (runs_root / "old" / "link").symlink_to(outside)
    record(log, "linked", T0)
    (runs_root / "linked").symlink_to(outside)
    launcher = LauncherService(log, clock, DirectoryCatalog(tmp_path / "apps"), SparkSubmitter(SparkConfig()),
                               tmp_path / "data", run_dir_retention=timedelta(days=7))
    launcher.recover()
    return clock, launcher, runs_root, outside


async def test_only_directories_of_runs_ended_longer_ago_than_the_retention_go(world):
    clock, launcher, runs_root, outside = world
    clock.set(T0 + timedelta(days=8) - timedelta(seconds=1))
    assert await launcher.delete_old_run_dirs() == []
    clock.set(T0 + timedelta(days=8))
    assert await launcher.delete_old_run_dirs() == ["old"]
    assert sorted(p.name for p in runs_root.iterdir()) == ["going", "linked", "not-a-run", "recent"]
    assert (outside / "keep.txt").read_text() == "keep", "a link inside a run dir is removed, never followed"
    clock.set(T0 + timedelta(days=400))
    assert await launcher.delete_old_run_dirs() == ["recent"]
    assert sorted(p.name for p in runs_root.iterdir()) == ["going", "linked", "not-a-run"]
    assert (outside / "keep.txt").exists()


async def test_a_timer_pass_sweeps_once_an_hour_is_up_by_the_clock(world):
    clock, launcher, runs_root, _ = world
    clock.set(T0 + timedelta(days=8) - timedelta(minutes=30))
    launcher.fire_due()  # sweeps (nothing is old enough yet); starts "going", whose program is not there: FAILED
    await launcher.drain()
    assert launcher.get("going").status.terminal
    clock.set(T0 + timedelta(days=8, minutes=10))
    launcher.fire_due()
    await launcher.drain()
    assert (runs_root / "old").exists(), "expired, but the hour since the last sweep is not up"
    clock.set(T0 + timedelta(days=8, minutes=30))
    launcher.fire_due()
    await launcher.drain()
    assert sorted(p.name for p in runs_root.iterdir()) == ["going", "linked", "not-a-run", "recent"]


async def test_the_event_loop_goes_on_while_a_sweep_deletes_many_directories(world, log):
    clock, launcher, runs_root, _ = world
    expired = [f"expired-{n:03}" for n in range(100)]
    for run_id in expired:
        record(log, run_id, T0)
        (runs_root / run_id / "attempt-2").mkdir(parents=True)
    launcher.recover()
    deleting, go_on = threading.Event(), threading.Event()
    ticks_while_blocked: list[int] = []
    ticks = 0

    def blocked_rmtree(path) -> None:
        """The first deletion waits until the loop has ticked (it never would if the sweep ran on the loop)."""
        if not deleting.is_set():
            deleting.set()
            if not go_on.wait(timeout=30):
                raise AssertionError("the event loop did not tick while the sweep was deleting")
            ticks_while_blocked.append(ticks)
        shutil.rmtree(path)

    sweeper = RunDirSweeper(runs_root, launcher.get, timedelta(days=7), remove_tree=blocked_rmtree)
    clock.set(T0 + timedelta(days=8))
    sweeper.sweep_if_due(clock.now())
    while ticks < 100:
        await asyncio.sleep(0)
        ticks += deleting.is_set()  # counted only once the sweep's thread is inside an rmtree
    go_on.set()
    await sweeper.finished()
    assert ticks_while_blocked and ticks_while_blocked[0] >= 100
    assert sorted(p.name for p in runs_root.iterdir()) == ["going", "linked", "not-a-run", "recent"]


@pytest.mark.parametrize("given, expected", [("7d", timedelta(days=7)), ("12h", timedelta(hours=12)),
                                             ("1d12h", timedelta(days=1, hours=12)), ("3600", timedelta(hours=1))])
def test_the_option_takes_durations(given, expected):
    assert resolve({"run_dir_retention": given}, {}, service="launcher").run_dir_retention == expected
    assert resolve({}, {"SLUICE_RUN_DIR_RETENTION": given}, service="launcher").run_dir_retention == expected


@pytest.mark.parametrize("given", ["7x", "-1d", "", "10s", "d7"])
def test_a_bad_retention_is_refused_naming_the_option(given):
    with pytest.raises(ConfigError, match="--run-dir-retention: must be"):
        resolve({"run_dir_retention": given}, {}, service="launcher")


def test_a_sweep_due_off_an_event_loop_is_left_to_the_next_pass_on_one(world):
    clock, launcher, runs_root, _ = world
    sweeper = RunDirSweeper(runs_root, launcher.get, timedelta(days=7))
    clock.set(T0 + timedelta(days=8))
    sweeper.sweep_if_due(clock.now())  # a synchronous start (no event loop): nothing deleted, nothing raised
    assert (runs_root / "old").exists()

    async def timer_pass() -> None:
        sweeper.sweep_if_due(clock.now())
        await sweeper.finished()
    asyncio.run(timer_pass())
    assert not (runs_root / "old").exists()
