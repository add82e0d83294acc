"""Programs without Spark: the launcher's ProgramSubmitter port, answered by a simulated world.

A "program" starts when the launcher submits it (that is what a launch is: the program really
started) and ends on the simulated clock after a duration derived from its job id, COMPLETED
(exit 0, a result.json) or FAILED (exit 1) also by its job id. Programs live in the world, not in
the launcher: a crashed launcher leaves its programs running, as a killed launcher leaves its
spark-submit processes.

The world keeps the supervise wrapper's promises (services/launcher/supervise.py, SparkSubmitter):
an attempt directory is claimed by the first program started for it, a second submit for it
starts nothing and follows the first, and `find(attempt_dir)` (the ProgramFinder port) gives a
restarted launcher the program an attempt had, ended or not, with its exit code."""
from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from sluice.clock import Clock
from sluice.domain.common import ProgramRef

FAILING_ONE_IN = 5


@dataclass(frozen=True)
class Launch:
    """One program start, with what it was handed: the job and its trigger context."""

    run_id: str
    job_id: str
    schedule_id: str
    properties: tuple[tuple[str, str], ...]
    logical_time: str | None
    notifications: tuple[str, ...]
    started_at: datetime

    @property
    def identity(self) -> tuple:
        """What must be equal between a run and the oracle (the start time is compared apart)."""
        return (self.job_id, self.schedule_id, self.properties, self.logical_time, self.notifications)


def _digest(job_id: str) -> int:
    return int.from_bytes(hashlib.sha256(job_id.encode()).digest()[:8], "big")


def duration_of(job_id: str) -> timedelta:
    return timedelta(minutes=5 + _digest(job_id) % 40)


def exit_code_of(job_id: str) -> int:
    return 1 if _digest(job_id) % FAILING_ONE_IN == 0 else 0


@dataclass
class Program:
    launch: Launch
    result_path: Path
    ends_at: datetime
    exit_code: int
    done: bool = False
    waiting: list[asyncio.Future] = field(default_factory=list)


class ProgramWorld:
    """Every program ever started; survives launcher crashes."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.launches: list[Launch] = []
        self._running: dict[int, Program] = {}
        self._pids = iter(range(10_000, 10_000_000))
        self._claims: dict[Path, tuple[int, Program]] = {}

    def submitter(self, supervised: bool = True) -> WorldSubmitter | UnsupervisedSubmitter:
        """`supervised=False`: programs started without the wrapper's promises (every submit starts
        one, nothing finds them after a restart), to show what the harness catches without them."""
        return WorldSubmitter(self) if supervised else UnsupervisedSubmitter(self)

    def start(self, context_path: Path, claim: bool = True) -> tuple[int, Program]:
        """The attempt's program: started now, or the one that claimed the attempt before."""
        claimed = self._claims.get(context_path.parent) if claim else None
        if claimed is not None:
            return claimed
        context = json.loads(context_path.read_text())
        launch = Launch(context["run_id"], context["job_id"], context["schedule"]["id"],
                        tuple(sorted(context["properties"].items())), context["system"]["logical_time"],
                        tuple(sorted(n["id"] for n in context["notifications"])), self._clock.now())
        self.launches.append(launch)
        program = Program(launch, Path(context["system"]["result_path"]),
                          self._clock.now() + duration_of(launch.job_id), exit_code_of(launch.job_id))
        pid = next(self._pids)
        self._running[pid] = program
        self._claims[context_path.parent] = (pid, program)
        return pid, program

    def find(self, attempt_dir: Path) -> tuple[int, Program] | None:
        return self._claims.get(attempt_dir)

    def next_end_at(self) -> datetime | None:
        return min((p.ends_at for p in self._running.values()), default=None)

    def end_due(self) -> int:
        """Programs whose time is up end (in end time, then start order); how many ended."""
        now = self._clock.now()
        due = sorted(((p.ends_at, pid) for pid, p in self._running.items() if p.ends_at <= now))
        for _, pid in due:
            program = self._running.pop(pid)
            program.done = True
            if program.exit_code == 0:
                program.result_path.parent.mkdir(parents=True, exist_ok=True)
                program.result_path.write_text(json.dumps({"outputs": [], "inputs": []}))
            for waiter in program.waiting:
                if not waiter.done():
                    waiter.set_result(program.exit_code)
        return len(due)

    def running(self) -> list[Launch]:
        return [p.launch for p in self._running.values()]


class WorldSubmitter:
    def __init__(self, world: ProgramWorld) -> None:
        self._world = world

    async def submit(self, entry_point: Path, context_path: Path, log_path: Path,
                     spark_conf: dict[str, str] | None = None) -> WorldProcess:
        pid, program = self._world.start(context_path)
        return WorldProcess(pid, program)

    def find(self, attempt_dir: Path) -> WorldProcess | None:
        found = self._world.find(attempt_dir)
        return None if found is None else WorldProcess(*found)


class UnsupervisedSubmitter:
    def __init__(self, world: ProgramWorld) -> None:
        self._world = world

    async def submit(self, entry_point: Path, context_path: Path, log_path: Path,
                     spark_conf: dict[str, str] | None = None) -> WorldProcess:
        return WorldProcess(*self._world.start(context_path, claim=False))


class WorldProcess:
    process_start = 0
    """No start time tells a simulated program from a later one with its pid."""

    def __init__(self, pid: int, program: Program) -> None:
        self.pid = pid
        self._program = program

    async def wait(self) -> int:
        if self._program.done:
            return self._program.exit_code
        waiter = asyncio.get_running_loop().create_future()
        self._program.waiting.append(waiter)
        return await waiter


class EveryProgramDeployed:
    """The ProgramCatalog: every program has an entry point (the world runs it)."""

    def entry_point(self, program: ProgramRef) -> Path:
        return Path("/simulated") / program.app / f"{program.program}.py"
