"""Cancel and time limits in the launcher, with real program processes (spark-submit is the stand-in
tests/support/fake_spark_submit.py, which runs the program in its own process under the supervise
wrapper): the whole process group goes (SIGTERM, then SIGKILL after the grace for a program that
ignores SIGTERM), the run ends KILLED with the reason and who asked, the launcher reports KILLED to
the checker and program-status triggers; a cancel recorded by a launcher that died before killing is
finished by the next one; a program past its time limit on the injected clock is killed and says so;
a standby launcher (without the lease) refuses a cancel, the holder carries it out."""
from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from sluice.bus.topics import PROGRAM_NOTIFICATIONS
from sluice.clock import SimulatedClock
from sluice.domain.common import ProgramRef, RunStatus
from sluice.domain.errors import FailedPrecondition, NotFound
from sluice.domain.jobs import Job, TriggerContext
from sluice.domain.runs import RequestCancel
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.ids import derived_id
from sluice.wire.common import notification_from_bytes
from sluice_services.launcher.programs import DirectoryCatalog, SparkConfig, SparkSubmitter
from sluice_services.launcher.service import LauncherService
from sluice_services.launcher.supervise import kill_all, process_start_ticks
from sluice.ids import run_id_for
from tests.integration.test_launcher_history import request
from tests.integration.test_launcher_lease import hosts  # noqa: F401  (a fixture)
from tests.integration.test_launcher_restart import crash
from tests.support.waiting import until

pytestmark = pytest.mark.integration

FAKE_SPARK_SUBMIT = Path(__file__).resolve().parents[1] / "support" / "fake_spark_submit.py"
PROGRAM = ProgramRef("ops", "etl", "sleeper")
T0 = datetime(2026, 11, 26, 9, tzinfo=timezone.utc)
SLEEPER = """
import json, signal, subprocess, sys, time
from pathlib import Path
context = json.loads(Path(sys.argv[sys.argv.index("--sluice-context") + 1]).read_text())
if context["properties"].get("ignore_sigterm"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                          "time.sleep(120)"])
Path(context["system"]["result_path"]).with_name("child.pid").write_text(str(child.pid))
print("sleeping", flush=True)
time.sleep(120)
"""


class World:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.clock = SimulatedClock(T0)
        self.log = SqliteEventLog(root / "events.db", clock=self.clock)
        apps = root / "apps" / PROGRAM.app
        apps.mkdir(parents=True)
        (apps / f"{PROGRAM.program}.py").write_text(SLEEPER)
        self.config = SparkConfig(spark_submit=str(FAKE_SPARK_SUBMIT))
        self.launchers: list[LauncherService] = []

    def launcher(self, kill_grace_seconds: float = 1.0) -> LauncherService:
        launcher = LauncherService(self.log, self.clock, DirectoryCatalog(self.root / "apps"),
                                   SparkSubmitter(self.config, 0.05), self.root / "data",
                                   kill_grace_seconds=kill_grace_seconds)
        launcher.recover()
        self.launchers.append(launcher)
        return launcher

    def job(self, name: str = "1", max_run_seconds: int = 0, **properties: str) -> Job:
        return Job(derived_id("job", name), "schedule-1", 1, PROGRAM, TriggerContext("schedule-1", "sleeper", properties),
                   self.clock.now(), max_run_seconds=max_run_seconds)

    async def running(self, launcher: LauncherService, job: Job) -> tuple[str, int]:
        """Launch the job; its run id and the pid of the child its program started, once both are up."""
        task = asyncio.ensure_future(request(launcher, job))
        run_id = await until(lambda: _running_id(launcher, job), "the run to start")
        child = launcher.attempt_dir(launcher.get(run_id)) / "child.pid"
        pid = await until(lambda: child.exists() and child.read_text() and int(child.read_text()),
                               "the program's child")
        self.draining = task
        return run_id, pid

    def statuses(self, launcher: LauncherService) -> list[str]:
        return [notification_from_bytes(o.value).payload.status.value
                for r in self.log.read_all(0, 10_000) for o in launcher.route(r) if o.topic == PROGRAM_NOTIFICATIONS]


def _running_id(launcher: LauncherService, job: Job) -> str | None:
    run = next((r for r in launcher.runs() if r.job.id == job.id), None)
    return run.id if run is not None and run.status is RunStatus.RUNNING else None


def gone(pid: int) -> bool:
    start = process_start_ticks(pid)
    if start is None:
        return True
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"


@pytest.fixture
async def world(tmp_path):
    made = World(tmp_path)
    yield made
    for launcher in made.launchers:
        await launcher.step_down()  # kills what a failed test left running
    made.log.close()


@pytest.mark.parametrize("ignore_sigterm", ["", "yes"])
async def test_cancel_kills_the_program_and_what_it_started_within_5_s_and_the_run_ends_killed(world, ignore_sigterm):
    launcher = world.launcher(kill_grace_seconds=1.0)
    run_id, child = await world.running(launcher, world.job(ignore_sigterm=ignore_sigterm))
    wrapper = launcher.get(run_id).pid
    began = time.monotonic()
    run = await launcher.cancel(run_id, "wrong input", "token:alice")
    took = time.monotonic() - began
    assert run.status is RunStatus.KILLED and took < 5, (run.status, took)
    assert run.error == "killed by token:alice: wrong input" and run.attempt.status is RunStatus.KILLED
    await until(lambda: gone(child) and gone(wrapper), "the program's processes to end", timeout=5)
    await world.draining
    assert world.statuses(launcher) == ["RUNNING", "KILLED"]
    assert [r.type for r in world.log.read_all(0, 100)][-2:] == ["RunCancelRequested", "RunKilled"]


async def test_cancel_of_an_unknown_or_ended_run_is_refused(world):
    launcher = world.launcher()
    run_id, _ = await world.running(launcher, world.job())
    await launcher.cancel(run_id, "", "token:alice")
    with pytest.raises(FailedPrecondition, match="it is KILLED"):
        await launcher.cancel(run_id, "again", "token:alice")
    with pytest.raises(NotFound):
        await launcher.cancel("no-such-run", "", "token:alice")


async def test_cancel_of_a_queued_run_ends_it_killed_without_starting_its_program(world):
    launcher = LauncherService(world.log, world.clock, DirectoryCatalog(world.root / "apps"),
                               SparkSubmitter(world.config, 0.05), world.root / "data", max_parallel=1)
    launcher.recover()
    world.launchers.append(launcher)
    first, _ = await world.running(launcher, world.job("first"))
    queued = world.job("queued")
    waiting = asyncio.ensure_future(request(launcher, queued))
    queued_id = await until(lambda: next((r.id for r in launcher.runs() if r.job.id == queued.id), None), "it queued")
    run = await launcher.cancel(queued_id, "not today", "token:bob")
    assert run.status is RunStatus.KILLED and run.attempt.started_at is None
    await launcher.cancel(first, "", "token:bob")
    await waiting
    assert not launcher.attempt_dir(run).exists() or not (launcher.attempt_dir(run) / "driver.log").exists()


async def test_a_cancel_recorded_by_a_launcher_that_died_before_killing_is_finished_by_the_next(world):
    first = world.launcher()
    run_id, child = await world.running(first, world.job())
    first._decide(run_id, RequestCancel("wrong input", "token:alice"))  # recorded; then the launcher dies
    await crash(first)
    assert not gone(child)
    second = world.launcher()
    second.resume()
    await until(lambda: second.get(run_id).status.terminal, "the run to end", timeout=10)
    assert second.get(run_id).status is RunStatus.KILLED
    await until(lambda: gone(child), "the program's child to end", timeout=5)


async def test_a_program_past_its_time_limit_on_the_clock_is_killed_and_marked_so(world):
    launcher = world.launcher()
    run_id, child = await world.running(launcher, world.job(max_run_seconds=2))
    started_at = launcher.get(run_id).attempt.started_at
    assert launcher.next_wake_at() == started_at + timedelta(seconds=2)
    world.clock.advance(timedelta(seconds=1))
    launcher.fire_due()
    assert launcher.get(run_id).status is RunStatus.RUNNING
    world.clock.advance(timedelta(seconds=1))
    launcher.fire_due()
    await until(lambda: launcher.get(run_id).status.terminal, "the run to end", timeout=5)
    run = launcher.get(run_id)
    assert run.status is RunStatus.KILLED and run.error == "killed by launcher (time limit): time limit 2s exceeded"
    await until(lambda: gone(child), "the program's child to end", timeout=5)


async def test_a_standby_launcher_refuses_a_cancel_and_the_lease_holder_carries_it_out(hosts):
    holder, standby = hosts.launcher("host-a"), hosts.launcher("host-b")
    await holder.on_launch_requested(hosts.request(1))
    run_id = run_id_for(derived_id("job", "1"))
    await until(lambda: holder.get(run_id).status is RunStatus.RUNNING, "the run RUNNING")
    with pytest.raises(FailedPrecondition, match="does not hold the launcher lease"):
        await standby.cancel(run_id, "from the wrong launcher", "token:ops")
    assert holder.get(run_id).cancel is None
    run = await holder.cancel(run_id, "from the holder", "token:ops")
    assert run.status is RunStatus.KILLED and run.error == "killed by token:ops: from the holder"


LEAVES_A_CHILD = """
import json, subprocess, sys
from pathlib import Path
context = json.loads(Path(sys.argv[sys.argv.index("--sluice-context") + 1]).read_text())
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
Path(context["system"]["result_path"]).with_name("child.pid").write_text(str(child.pid))
Path(context["system"]["result_path"]).write_text(json.dumps({"outputs": [], "inputs": [], "consumed": []}))
"""


@pytest.mark.parametrize("exit_code", [0, 3])
async def test_what_a_program_started_and_left_running_is_killed_when_it_exits(world, exit_code):
    """Regression: only a wrapper that vanished had its process group killed; a program that exited (with
    any code) left its children running past the run's end, out of reach of a cancel or a time limit."""
    (world.root / "apps" / PROGRAM.app / f"{PROGRAM.program}.py").write_text(
        LEAVES_A_CHILD + f"raise SystemExit({exit_code})\n")
    launcher = world.launcher()
    run_id = await request(launcher, world.job())
    run = launcher.get(run_id)
    assert run.status is (RunStatus.COMPLETED if exit_code == 0 else RunStatus.FAILED), run.error
    child = int((launcher.attempt_dir(run) / "child.pid").read_text())
    assert await until(lambda: gone(child), "the program's child to be killed")


ESCAPES_ITS_GROUP = """
import json, os, signal, sys, time
from pathlib import Path
context = json.loads(Path(sys.argv[sys.argv.index("--sluice-context") + 1]).read_text())
escapee = Path(context["system"]["result_path"]).with_name("child.pid")
if os.fork() == 0:  # a daemon's double fork: a session of its own, its parent gone
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        escapee.write_text(str(os.getpid()))
        time.sleep(120)
    os._exit(0)
while not escapee.exists() or not escapee.read_text():
    time.sleep(0.01)
if context["properties"].get("ignore_sigterm"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if context["properties"].get("keep_running"):
    time.sleep(120)
Path(context["system"]["result_path"]).write_text(json.dumps({"outputs": [], "inputs": [], "consumed": []}))
"""


async def test_what_a_program_started_in_a_session_of_its_own_is_killed_when_it_exits(world):
    """Regression: the wrapper's process group was all a run's end killed; a child that left it (setsid, its
    parent gone, as a daemon does) ran on past the run, reparented to init."""
    (world.root / "apps" / PROGRAM.app / f"{PROGRAM.program}.py").write_text(ESCAPES_ITS_GROUP)
    launcher = world.launcher()
    run_id = await request(launcher, world.job())
    run = launcher.get(run_id)
    assert run.status is RunStatus.COMPLETED, run.error
    escapee = int((launcher.attempt_dir(run) / "child.pid").read_text())
    try:
        assert await until(lambda: gone(escapee), "the escaped child to be killed")
    finally:
        kill_all([escapee])


@pytest.mark.parametrize("ignore_sigterm", ["", "yes"])
async def test_cancel_kills_what_the_program_started_in_a_session_of_its_own(world, ignore_sigterm):
    (world.root / "apps" / PROGRAM.app / f"{PROGRAM.program}.py").write_text(ESCAPES_ITS_GROUP)
    launcher = world.launcher(kill_grace_seconds=1.0)
    run_id, escapee = await world.running(launcher, world.job(ignore_sigterm=ignore_sigterm, keep_running="yes"))
    try:
        run = await launcher.cancel(run_id, "wrong input", "token:alice")
        assert run.status is RunStatus.KILLED
        await until(lambda: gone(escapee), "the escaped child to be killed", timeout=5)
        await world.draining
    finally:
        kill_all([escapee])
