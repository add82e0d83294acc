"""Finding a program again after the launcher restarted, from what the supervise wrapper left in
the attempt's directory: `spawned` (its pid and start time, written before the program starts) and
`exit_code` (written when the program ended). A process is named by pid *and* start time, so a
later process that was given the same pid is never mistaken for it."""
from __future__ import annotations

import asyncio
import logging
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from sluice.datasets.files import PublishError, read_program_file
from sluice_services.launcher.supervise import EXIT_CODE, SPAWNED, descendants, process_start_ticks

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProcessIdentity:
    pid: int
    process_start: int

    def alive(self) -> bool:
        """Running (not a zombie) and still the same process."""
        try:
            with open(f"/proc/{self.pid}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            return False
        return fields[0] != b"Z" and int(fields[19]) == self.process_start


def identity_of(pid: int) -> ProcessIdentity | None:
    start = process_start_ticks(pid)
    return None if start is None else ProcessIdentity(pid, start)


def spawned(attempt_dir: Path) -> ProcessIdentity | None:
    """The wrapper that claimed the attempt, None if none did (the program was never started by it)."""
    try:
        pid, start = _small_file(attempt_dir / SPAWNED).split()
        return ProcessIdentity(int(pid), int(start))
    except (OSError, ValueError, PublishError):
        return None


def exit_code(attempt_dir: Path) -> int | None:
    """The program's exit code as the wrapper recorded it, None if it recorded none (yet)."""
    try:
        return int(_small_file(attempt_dir / EXIT_CODE))
    except (OSError, ValueError, PublishError):
        return None


def _small_file(path: Path) -> bytes:
    """A file of the wrapper's in the attempt's directory, which its program can write too: not through a
    link, never waited on (a FIFO would hold the launcher's loop), a few bytes, written by this user (the
    wrapper's; a program run as another user that wrote `spawned` would have the launcher signal any pid)."""
    return read_program_file(path, limit=64, owner=os.geteuid())


async def wait_ended(process: ProcessIdentity, poll_seconds: float = 1.0) -> None:
    """Until the process has ended: a pidfd (Linux >= 5.3) tells the event loop at once, even for a
    process that is not our child; without one, the process is looked at every `poll_seconds`."""
    try:
        pidfd = os.pidfd_open(process.pid)
    except (OSError, AttributeError):
        pidfd = None
    try:
        if not process.alive():  # checked after opening the pidfd: it refers to this very process
            return
        if pidfd is None:
            while process.alive():
                await asyncio.sleep(poll_seconds)
            return
        loop = asyncio.get_running_loop()
        ended = loop.create_future()
        loop.add_reader(pidfd, lambda: ended.done() or ended.set_result(None))
        try:
            await ended
        finally:
            loop.remove_reader(pidfd)
    finally:
        if pidfd is not None:
            os.close(pidfd)


def kill_leftovers(process: ProcessIdentity) -> bool:
    """The wrapper has ended (or vanished, killed): what its program started may still run in its
    process group (it led a session of its own), which is killed before the attempt's end is
    recorded. Only when its pid is free or still its own zombie: the kernel hands out no pid still
    used as a process group id, so a free pid means any group under it is the wrapper's own; a
    reused pid means the group is gone. True if a group was there to kill."""
    start = process_start_ticks(process.pid)
    if start is not None and (start != process.process_start or process.alive()):
        return False
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def kill_group(process: ProcessIdentity) -> None:
    """A program's wrapper leads a session of its own: kill it and what it started, if it is still that
    process (a start time of 0, unknown, trusts the pid)."""
    signal_program(process, signal.SIGKILL)


def signal_program(process: ProcessIdentity, signum: int) -> None:
    """The signal to the wrapper's process group and to every process below the wrapper (those that
    left the group are reparented to it, its subreaper), if it is still that process."""
    if process.pid and (not process.process_start or process.alive()):
        for pid in descendants(process.pid):
            try:
                os.kill(pid, signum)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            os.killpg(process.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


class SupervisedProgram:
    """A program started through the wrapper, found again by a launcher that did not start it."""

    def __init__(self, process: ProcessIdentity, attempt_dir: Path, poll_seconds: float = 1.0) -> None:
        self._process = process
        self._attempt_dir = attempt_dir
        self._poll_seconds = poll_seconds

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def process_start(self) -> int:
        return self._process.process_start

    async def wait(self) -> int | None:
        await wait_ended(self._process, self._poll_seconds)
        return _recorded_exit(self._process, self._attempt_dir)


class SupervisedChild:
    """The wrapper this launcher started for an attempt."""

    def __init__(self, child: asyncio.subprocess.Process, attempt_dir: Path, poll_seconds: float = 1.0) -> None:
        self._child = child
        self._attempt_dir = attempt_dir
        self._poll_seconds = poll_seconds
        identity = identity_of(child.pid)  # our unreaped child: its pid cannot have been reused
        self.process_start = identity.process_start if identity else 0

    @property
    def pid(self) -> int:
        return self._child.pid

    async def wait(self) -> int | None:
        code = await self._child.wait()
        claimant = spawned(self._attempt_dir)
        if claimant is None:
            return code  # the wrapper failed before starting anything (its own error is in the log)
        if claimant.pid != self._child.pid:  # a wrapper started before a launcher restart had claimed it
            return await SupervisedProgram(claimant, self._attempt_dir, self._poll_seconds).wait()
        return _recorded_exit(claimant, self._attempt_dir)


def _recorded_exit(process: ProcessIdentity, attempt_dir: Path) -> int | None:
    """The exit code the wrapper recorded; whatever the program left running goes first, so that
    nothing of the attempt outlives its end (nor touches its staged outputs while they are published)."""
    code = exit_code(attempt_dir)
    if kill_leftovers(process):
        log.warning("%s: killed what %s wrapper %d had left running", attempt_dir,
                    "its vanished" if code is None else "the program of", process.pid)
    return code
