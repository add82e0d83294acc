"""Stopping a run's program, and deleting old run directories.

A program's supervise wrapper leads a session (and process group) of its own, which spark-submit, the
driver (the JVM in client deploy mode, with its Python driver and workers) and whatever the program
started inherit: the whole group is sent SIGTERM, then SIGKILL after a grace. On a standalone master
the application ends with its client-mode driver, so no call to the master is needed."""
from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import signal
from datetime import datetime, timedelta
from pathlib import Path
from typing import Callable

from sluice.domain.runs import Run
from sluice_services.launcher.tracking import ProcessIdentity, kill_group, kill_leftovers, signal_program, wait_ended

log = logging.getLogger(__name__)

KILL_GRACE_SECONDS = 3.0
"""Between SIGTERM (Spark stops its context, the driver says goodbye to the master) and SIGKILL."""
DEFAULT_RUN_DIR_RETENTION = timedelta(days=7)
SWEEP_EVERY = timedelta(hours=1)
DECIDE_BATCH = 100
"""Run dirs a sweep decides on (a run each, perhaps read from the log) between turns it leaves to the loop."""
RUN_DIR_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-]{0,199}")
"""What a run id (its directory's name) looks like; nothing else under runs/ is a run's."""


async def terminate(process: ProcessIdentity, grace_seconds: float = KILL_GRACE_SECONDS,
                    poll_seconds: float = 0.1) -> None:
    """SIGTERM to the program (its wrapper's process group and what left it), SIGKILL to what is left after
    `grace_seconds`."""
    signal_program(process, signal.SIGTERM)
    try:
        await asyncio.wait_for(wait_ended(process, poll_seconds), grace_seconds)
    except asyncio.TimeoutError:
        pass
    if process.alive():
        kill_group(process)
    else:
        kill_leftovers(process)  # the wrapper ended; anything it started that ignored SIGTERM goes now


class Terminations:
    """The terminations going on (kept referenced until they finish), each SIGTERM then SIGKILL after `grace_seconds`."""

    def __init__(self, grace_seconds: float = KILL_GRACE_SECONDS) -> None:
        self.grace_seconds = grace_seconds
        self._going: set[asyncio.Task] = set()

    def start(self, process: ProcessIdentity) -> None:
        task = asyncio.get_running_loop().create_task(terminate(process, self.grace_seconds))
        self._going.add(task)
        task.add_done_callback(self._going.discard)


class RunDirSweeper:
    """Deletes the directories of runs ended longer than `retention` ago, at most once per SWEEP_EVERY. What
    to delete is decided on the event loop by the injected clock (a turn left to the loop's other tasks every
    DECIDE_BATCH run dirs); listing runs/ and deleting are done in a thread, so that the loop goes on serving
    while many directories go."""

    def __init__(self, runs_root: Path, get_run: Callable[[str], Run | None],
                 retention: timedelta = DEFAULT_RUN_DIR_RETENTION,
                 remove_tree: Callable[[Path], None] = shutil.rmtree) -> None:
        self._runs_root, self._get_run, self.retention = runs_root, get_run, retention
        self._remove_tree = remove_tree
        self._next_at: datetime | None = None
        self._going: asyncio.Task | None = None

    def sweep_if_due(self, now: datetime) -> None:
        """Start a sweep in the background once SWEEP_EVERY is up, unless one is still going. Called off an
        event loop (a synchronous start), it leaves the sweep to the next pass on one."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if (self._next_at is None or self._next_at <= now) and (self._going is None or self._going.done()):
            self._next_at = now + SWEEP_EVERY
            self._going = loop.create_task(self.sweep(now))
            self._going.add_done_callback(_log_failure)

    async def finished(self) -> None:
        """Wait for the sweep going on, if any (tests, orderly shutdown)."""
        if self._going is not None:
            await asyncio.gather(self._going, return_exceptions=True)

    async def sweep(self, now: datetime) -> list[str]:
        """The run ids whose directories were deleted."""
        self._next_at = now + SWEEP_EVERY
        names = await asyncio.to_thread(run_dir_names, self._runs_root)
        expired = []
        for index, name in enumerate(names, 1):
            if _expired(self._get_run(name), now, self.retention):
                expired.append(name)
            if index % DECIDE_BATCH == 0:
                await asyncio.sleep(0)  # a run let go of is read from the log: thousands must not hold up the loop
        deleted = await asyncio.to_thread(delete_run_dirs, self._runs_root, expired, self._remove_tree)
        if deleted:
            log.info("deleted the directories of %d run(s) ended before %s", len(deleted), now - self.retention)
        return deleted


def _log_failure(sweep: asyncio.Task) -> None:
    if not sweep.cancelled() and (error := sweep.exception()) is not None:
        log.warning("sweep of run dirs failed: %r", error)


def parse_retention(text: str | int) -> timedelta:
    """`7d`, `12h`, `30m`, `45s`, combined (`1d12h`), or whole seconds; ValueError saying what is expected."""
    given = str(text).strip().lower()
    if given.isdigit():
        return timedelta(seconds=int(given))
    parts = re.findall(r"(\d+)([smhd])", given)
    if not given or "".join(f"{number}{unit}" for number, unit in parts) != given:
        raise ValueError(f"must be a duration such as 7d, 12h or 30m, got {text!r}")
    sizes = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
    return timedelta(seconds=sum(int(number) * sizes[unit] for number, unit in parts))


def run_dir_names(runs_root: Path) -> list[str]:
    """The names of the directories under runs/ named like a run; a link or anything else is left out."""
    try:
        entries = list(os.scandir(runs_root))
    except OSError:
        return []
    return [entry.name for entry in entries
            if RUN_DIR_NAME.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False)]


def _expired(run: Run | None, now: datetime, retention: timedelta) -> bool:
    """A run that ended at least `retention` before `now`; not one going, nor a directory of no run in the log."""
    return run is not None and run.status.terminal and run.ended_at is not None and run.ended_at + retention <= now


def delete_run_dirs(runs_root: Path, names: list[str],
                    remove_tree: Callable[[Path], None] = shutil.rmtree) -> list[str]:
    """Delete these run directories (shutil.rmtree removes links inside, never follows them); the names deleted."""
    deleted = []
    for name in names:
        run_dir = runs_root / name
        try:
            remove_tree(run_dir)
        except OSError as error:
            log.warning("run dir %s not deleted: %r", run_dir, error)
            continue
        deleted.append(name)
    return deleted
