"""A program that ends while the event log cannot write is recorded COMPLETED once the log writes again
(issue 25; found by the fault campaign, tests/faults): the launcher used to treat the failed append as
the run's failure, recording it FAILED ("launcher error: EventLogUnavailable") when the next append went
through, or dropping the run, RUNNING forever, when that one failed too. Real subprocesses through the
real submit path (tests/support/stand_in_program.py), a real SQLite log whose appends fail as
PostgreSQL's do while it is down."""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sluice.domain.common import RunStatus
from sluice.eventlog.port import EventLogUnavailable
from tests.integration.test_launcher_restart import World
from tests.support.waiting import until

pytestmark = pytest.mark.integration


class FailingAppends:
    """The log, with its next `failures` appends refused as during a PostgreSQL outage."""

    def __init__(self, log) -> None:
        self._log = log
        self.failures = 0
        self.refused = 0

    def append_batch(self, appends, *, checkpoints=()):
        if self.failures:
            self.failures -= 1
            self.refused += 1
            raise EventLogUnavailable("PostgreSQL unavailable (append): the server is restarting")
        return self._log.append_batch(appends, checkpoints=checkpoints)

    def append(self, *args, **kwargs):
        if self.failures:
            self.failures -= 1
            self.refused += 1
            raise EventLogUnavailable("PostgreSQL unavailable (append): the server is restarting")
        return self._log.append(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._log, name)


@pytest.mark.parametrize("failures", [1, 6], ids=["one append", "an outage"])
async def test_a_run_ending_while_the_log_cannot_write_is_recorded_completed_after(tmp_path: Path, failures: int):
    world = World(tmp_path)
    world.log = FailingAppends(world.log)
    launcher = world.launcher()
    run_id = await world.request(launcher, world.job())
    await until(lambda: launcher.get(run_id).status is RunStatus.RUNNING, "the run RUNNING")

    world.log.failures = failures
    world.gate.touch()  # the program ends while the log refuses appends
    await until(lambda: world.log.failures == 0, "the launcher to meet every refused append")
    await until(lambda: launcher.get(run_id).status.terminal, "the run recorded ended", timeout=30)
    await launcher.drain()

    run = launcher.get(run_id)
    assert run.status is RunStatus.COMPLETED, run
    assert [attempt.status for attempt in run.attempts] == [RunStatus.COMPLETED]
    assert len(world.starts_of(run_id)) == 1, "the program ran once"
    assert world.log.refused == failures
    world.log.close()
