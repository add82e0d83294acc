"""Programs run as another user (--program-user): the launcher (root) hands the attempt's directory to
it and nothing else, the wrapper drops to it before exec. Real processes, with spark-submit's stand-in
run by Debian's /usr/bin/python3 (the project's interpreter may be under a home the user cannot enter)."""
from __future__ import annotations

import json
import os
import pwd
import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import pytest

from sluice.clock import SimulatedClock
from sluice.domain.common import ProgramRef, RunStatus
from sluice.domain.jobs import Job, RetryPolicy, TriggerContext
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.ids import derived_id
from sluice_services.launcher.program_user import ProgramUser
from sluice_services.launcher.programs import DirectoryCatalog, SparkConfig, SparkSubmitter
from sluice_services.launcher.service import LauncherService
from sluice_services.launcher.tracking import spawned
from tests.integration.test_launcher_history import request

pytestmark = pytest.mark.integration

FAKE_SPARK_SUBMIT = Path(__file__).resolve().parents[1] / "support" / "fake_spark_submit.py"
PROGRAM = ProgramRef("ops", "etl", "probe")
T0 = datetime(2026, 11, 28, 9, tzinfo=timezone.utc)
NOBODY = pwd.getpwnam("nobody")
PROBE = """
import json, os, sys
from pathlib import Path
context = json.loads(Path(sys.argv[sys.argv.index("--sluice-context") + 1]).read_text())
system = context["system"]
def reads(path):
    try:
        Path(path).read_bytes()
        return "read"
    except PermissionError:
        return "denied"
launcher_dir = Path(system["data_dir"]).parent
found = {"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(), "home": os.environ["HOME"],
         "cwd": os.getcwd(), "events": reads(launcher_dir / "events.db"),
         "key": reads(launcher_dir / "run-credentials.key"), "launcher": reads(f"/proc/{os.getppid()}/environ")}
staged = Path(system["staging_dir"]) / "probe"
staged.mkdir(parents=True)
data = json.dumps(found).encode()
(staged / "probe.json").write_bytes(data)
(staged / "probe.json").chmod(0o666)
output = {"namespace": "ops", "dataset": "probes", "key": {"n": "1"}, "staged_location": str(staged),
          "files": [{"path": "probe.json", "size_bytes": len(data), "sha256": __import__("hashlib").sha256(data).hexdigest()}]}
Path(system["result_path"]).with_name("consumed.json").write_text("[]")
Path(system["result_path"]).write_text(json.dumps({"outputs": [output], "inputs": [], "consumed": []}))
"""

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root: CI runs as root")


class World:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.clock = SimulatedClock(T0)
        self.log = SqliteEventLog(root / "events.db", clock=self.clock)
        (root / "run-credentials.key").write_text("secret\n")
        (root / "run-credentials.key").chmod(0o600)
        apps = root / "apps" / PROGRAM.app
        apps.mkdir(parents=True)
        (apps / f"{PROGRAM.program}.py").write_text(PROBE)
        for directory in (root, root / "apps", apps):
            directory.chmod(0o755)
        self.launchers: list[LauncherService] = []

    def launcher(self) -> LauncherService:
        submitter = SparkSubmitter(SparkConfig(spark_submit=str(FAKE_SPARK_SUBMIT)), 0.05,
                                   program_user=ProgramUser.named("nobody"))
        launcher = LauncherService(self.log, self.clock, DirectoryCatalog(self.root / "apps"), submitter,
                                   self.root / "data")
        launcher.recover()
        self.launchers.append(launcher)
        return launcher

    def job(self, name: str = "1", retries: int = 0) -> Job:
        return Job(derived_id("job", name), "schedule-1", 1, PROGRAM, TriggerContext("schedule-1", "probe", {}),
                   self.clock.now(), retry_policy=RetryPolicy(max_retries=retries, delay_seconds=0, retry_failed=True))


@pytest.fixture
async def world():
    root = Path(tempfile.mkdtemp(prefix="sluice-program-user-"))  # pytest's own are 0700: not the user's to enter
    made = World(root)
    try:
        yield made
    finally:
        for launcher in made.launchers:
            await launcher.step_down()
        made.log.close()
        shutil.rmtree(root)


@needs_root
async def test_a_program_runs_as_the_program_user_and_reaches_nothing_of_the_launchers(world):
    launcher = world.launcher()
    run = launcher.get(await request(launcher, world.job()))
    assert run.status is RunStatus.COMPLETED, (run.error, (launcher.attempt_dir(run) / "driver.log").read_text())
    attempt_dir = launcher.attempt_dir(run)
    (published,) = (world.root / "data").rglob("probe.json")
    found = json.loads(published.read_text())
    owner = published.stat()
    assert (owner.st_uid, owner.st_mode & 0o777) == (0, 0o644), "a published file is the service's, not the program's"
    assert (found["uid"], found["gid"], found["groups"]) == (NOBODY.pw_uid, NOBODY.pw_gid, [])
    assert found["home"] == found["cwd"] == str(attempt_dir)
    assert (found["events"], found["key"], found["launcher"]) == ("denied", "denied", "denied")
    assert attempt_dir.stat().st_uid == NOBODY.pw_uid and (attempt_dir / "context.json").stat().st_uid == NOBODY.pw_uid
    assert (attempt_dir / "spawned").stat().st_uid == 0 and (attempt_dir / "exit_code").stat().st_uid == 0


@needs_root
async def test_the_wrappers_files_a_program_forged_are_not_believed(world):
    """Regression guard: a program owns its attempt's directory; a `spawned` it wrote naming another process
    (pid 1) would have a restarted launcher signal that process's group as root."""
    attempt_dir = world.root / "runs" / "forged"
    attempt_dir.mkdir(parents=True)
    (attempt_dir / "spawned").write_text(f"1 {open('/proc/1/stat').read().rsplit(')', 1)[1].split()[19]}\n")
    assert spawned(attempt_dir) is not None
    os.chown(attempt_dir / "spawned", NOBODY.pw_uid, NOBODY.pw_gid)
    assert spawned(attempt_dir) is None


LEAVES_LINKS = PROBE + """
victim = Path(os.environ["HOME"]).parent.parent / "victim"
if context["system"]["attempt"] == 1:
    Path(system["result_path"]).with_name("attempt-2").symlink_to(victim)
    raise SystemExit(1)
"""


@needs_root
async def test_a_later_attempts_directory_is_never_made_through_a_link_its_first_program_left(world):
    (world.root / "apps" / PROGRAM.app / f"{PROGRAM.program}.py").write_text(LEAVES_LINKS)
    victim = world.root / "victim"
    victim.mkdir(mode=0o755)
    launcher = world.launcher()
    run_id = await request(launcher, world.job(retries=1))
    launcher.fire_due()  # the retry, due at once
    await launcher.drain()
    run = launcher.get(run_id)
    assert run.status is RunStatus.FAILED and run.attempt.number == 2, run
    assert "the attempt's directory was tampered with" in run.attempt.error, run.attempt.error
    assert victim.stat().st_mode & 0o777 == 0o755 and not list(victim.iterdir())


def test_a_launcher_not_running_as_root_refuses_another_program_user(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(ValueError, match="running programs as nobody needs the launcher to run as root"):
        ProgramUser.named("nobody")
    with pytest.raises(ValueError, match="no such user 'no-such-user'"):
        ProgramUser.named("no-such-user")
