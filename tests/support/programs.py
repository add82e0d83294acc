"""Programs without Spark for the scenario tests: the launcher's ProgramSubmitter and ProgramCatalog
ports, answered in memory. A submitted program runs until the test ends it (`end`), with the exit a
real one would have: COMPLETED exits 0 leaving a result.json (no outputs), FAILED exits 1, LOST ends
without an exit status."""
from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path

from sluice.domain.common import ProgramRef, RunStatus

EXIT_CODES = {RunStatus.COMPLETED: 0, RunStatus.FAILED: 1, RunStatus.LOST: None}


@dataclass
class FakeProgram:
    pid: int
    run_id: str
    result_path: Path
    process_start: int = 0
    """The start time the launcher records with the pid (ProgramProcess.process_start)."""
    _ended: asyncio.Future | None = field(default=None, repr=False)

    async def wait(self) -> int | None:
        if self._ended is None:
            self._ended = asyncio.get_running_loop().create_future()
        return await self._ended

    def end(self, exit_code: int | None) -> None:
        if exit_code == 0:
            self.result_path.parent.mkdir(parents=True, exist_ok=True)
            self.result_path.write_text(json.dumps({"outputs": [], "inputs": []}))
        if self._ended is None:
            self._ended = asyncio.get_running_loop().create_future()
        if not self._ended.done():
            self._ended.set_result(exit_code)


class FakePrograms:
    """Every program is deployed; each submit starts one, found again by its run id."""

    def __init__(self) -> None:
        self.running: dict[str, FakeProgram] = {}
        self._pids = iter(range(10_000, 10_000_000))

    def entry_point(self, program: ProgramRef) -> Path:
        return Path("/simulated") / program.app / f"{program.program}.py"

    async def submit(self, entry_point: Path, context_path: Path, log_path: Path,
                     spark_conf: dict[str, str] | None = None) -> FakeProgram:
        context = json.loads(context_path.read_text())
        program = FakeProgram(next(self._pids), context["run_id"], Path(context["system"]["result_path"]))
        self.running[program.run_id] = program
        return program

    def end(self, run_id: str, status: RunStatus) -> None:
        """The run's program ends as a program with that outcome would; KeyError if it is not running."""
        self.running.pop(run_id).end(EXIT_CODES[status])
