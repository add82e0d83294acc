"""Ports for finding and starting programs, with their adapters."""
from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Mapping, Protocol, Sequence, runtime_checkable

from sluice.domain.common import ProgramRef
from sluice.domain.names import validate_name
from sluice.paths import inside
from sluice_services.launcher.context_file import opened_as_made
from sluice_services.launcher.program_env import program_environment
from sluice_services.launcher.program_user import ProgramUser
from sluice_services.launcher.spark_config import SparkConfig
from sluice_services.launcher.tracking import SupervisedChild, SupervisedProgram, spawned


class ProgramCatalog(Protocol):
    def entry_point(self, program: ProgramRef) -> Path | None:
        """The program's PySpark entry point, None when the program is unknown."""
        ...


class DirectoryCatalog:
    """Programs laid out as <apps_dir>/<app>/<program>.py (the examples/ folder follows it)."""

    def __init__(self, apps_dir: Path) -> None:
        self._apps_dir = apps_dir

    def expected(self, program: ProgramRef) -> Path:
        """Where the program's entry point must be: <apps_dir>/<app>/<program>.py."""
        return self._apps_dir / program.app / f"{program.program}.py"

    def entry_point(self, program: ProgramRef) -> Path | None:
        """InvalidArgument if the names break the identifier rule or the file (symlinks followed) lies
        outside the apps dir: no name reaches a `.py` elsewhere on the host."""
        validate_name("program.app", program.app)
        validate_name("program.program", program.program)
        path = self._apps_dir / program.app / f"{program.program}.py"
        if not path.is_file():
            return None
        inside(self._apps_dir, path, "program.program")
        return path


class ProgramProcess(Protocol):
    @property
    def pid(self) -> int: ...

    @property
    def process_start(self) -> int:
        """The process's start time (clock ticks since boot) that tells it from a later process with
        its pid; 0 where none is known (the launcher then trusts the pid alone)."""
        ...

    async def wait(self) -> int | None:
        """Wait for the program to end; its exit code, None if it ended leaving none (it vanished:
        the run is LOST)."""
        ...


class ProgramSubmitter(Protocol):
    async def submit(self, entry_point: Path, context_path: Path, log_path: Path,
                     spark_conf: dict[str, str] | None = None) -> ProgramProcess:
        """Start the program for the attempt whose directory is `context_path.parent`, with the schedule's
        Spark settings over the launcher's (InvalidArgument, naming the key, for one a schedule may not set)."""
        ...


@runtime_checkable
class ProgramFinder(Protocol):
    """A submitter whose programs outlive the launcher implements this too: after a restart, the
    launcher asks it for the program of an attempt it had started (or was starting). Without it, a
    restarted launcher starts STARTING attempts again and takes RUNNING ones for LOST."""

    def find(self, attempt_dir: Path) -> ProgramProcess | None:
        """The program started for the attempt (even one still starting), None if none was."""
        ...


SUPERVISE = Path(__file__).with_name("supervise.py")


def open_log(path: Path):
    """The attempt's driver log, appended to (opened_as_made: the directory may be its program's)."""
    return os.fdopen(opened_as_made(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "ab")


class SparkSubmitter:
    """Starts a program with spark-submit against the configured master (local[*] by default; see
    sluice_services.launcher.spark_config), through the supervise wrapper, in a session of its own (it
    outlives the launcher). With any master the driver is this local spark-submit process (client
    deploy mode): its exit is the run's end.

    The program's environment is the allowlist of sluice_services.launcher.program_env (plus
    `program_env`'s names) of `environ` (default: the launcher's), never the whole of it."""

    def __init__(self, config: SparkConfig = SparkConfig(), poll_seconds: float = 1.0, *,
                 program_env: Sequence[str] = (), environ: Mapping[str, str] | None = None,
                 program_user: ProgramUser | None = None) -> None:
        self._config = config
        self._user = program_user
        """Who programs run as (sluice_services.launcher.program_user); None: the launcher's user."""
        self._poll_seconds = poll_seconds
        """How often a re-attached program is looked at, where the kernel cannot tell (no pidfd)."""
        self._program_env = tuple(program_env)
        self._environ = environ

    def command(self, entry_point: Path, context_path: Path, spark_conf: dict[str, str] | None = None) -> list[str]:
        return self._config.command(entry_point, context_path, spark_conf or {})

    async def submit(self, entry_point: Path, context_path: Path, log_path: Path,
                     spark_conf: dict[str, str] | None = None) -> SupervisedChild:
        command = self.command(entry_point, context_path, spark_conf)
        env, switch = self.environment(), []
        if self._user is not None:
            env.update(self._user.environment(context_path.parent))
            switch = self._user.wrapper_arguments()
            self._user.hand_over(context_path.parent, context_path)
        with open_log(log_path) as log_file:
            child = await asyncio.create_subprocess_exec(
                sys.executable, "-I", "-S", str(SUPERVISE), str(context_path.parent), *switch, "--",
                *command, stdin=asyncio.subprocess.DEVNULL,
                stdout=log_file, stderr=asyncio.subprocess.STDOUT, env=env, start_new_session=True,
            )
        return SupervisedChild(child, context_path.parent, self._poll_seconds)

    def environment(self) -> dict[str, str]:
        environ = os.environ if self._environ is None else self._environ
        return program_environment(environ, self._program_env, {
            "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
            **self._config.environment(environ)})

    def find(self, attempt_dir: Path) -> SupervisedProgram | None:
        claimant = spawned(attempt_dir)
        return None if claimant is None else SupervisedProgram(claimant, attempt_dir, self._poll_seconds)
