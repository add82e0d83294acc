"""A run attempt's driver log (the program's stdout and stderr, as its wrapper wrote them), read in
chunks from an offset or from its last lines, and followed while the attempt goes on. Every input is
hostile: the run id must look like one, the attempt must be one of the run's, the offset not negative,
the line count bounded; the file is opened below the runs directory only, never through a link."""
from __future__ import annotations

import asyncio
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator, Callable

from sluice.domain.errors import InvalidArgument, NotFound
from sluice.domain.runs import Run
from sluice.paths import inside
from sluice_services.launcher.run_control import RUN_DIR_NAME

DRIVER_LOG = "driver.log"
CHUNK_BYTES = 64 * 1024
LOG_TAIL_BYTES = 2000
FOLLOW_POLL_SECONDS = 0.2
MAX_TAIL_LINES = 100_000


@dataclass(frozen=True)
class LogChunk:
    attempt: int
    offset: int
    """Where `data` starts in the attempt's log."""
    data: bytes


def attempt_dir(runs_root: Path, run_id: str, attempt: int) -> Path:
    """runs/<run id> for the first attempt, runs/<run id>/attempt-<n> after (as the launcher lays them out)."""
    run_dir = runs_root / run_id
    return run_dir if attempt == 1 else run_dir / f"attempt-{attempt}"


def checked_request(get_run: Callable[[str], Run | None], run_id: str, attempt: int, from_offset: int,
                    tail_lines: int = 0) -> tuple[Run, int]:
    """The run and the attempt's number (0: the current one); InvalidArgument naming the field, NotFound."""
    if not run_id:
        raise InvalidArgument("id", "must not be empty")
    if not RUN_DIR_NAME.fullmatch(run_id):
        raise InvalidArgument("id", f"not a run id: {run_id[:80]!r}")
    if from_offset < 0:
        raise InvalidArgument("from_offset", f"must not be negative, got {from_offset}")
    if not 0 <= tail_lines <= MAX_TAIL_LINES:
        raise InvalidArgument("tail_lines", f"must be 0 (from from_offset) to {MAX_TAIL_LINES:,}, got {tail_lines}")
    if tail_lines and from_offset:
        raise InvalidArgument("tail_lines", "cannot be given with a from_offset: one says where to start")
    if attempt < 0:
        raise InvalidArgument("attempt", f"must be 1 or more (0: the current one), got {attempt}")
    run = get_run(run_id)
    if run is None:
        raise NotFound(f"run {run_id} does not exist")
    latest = run.attempt.number
    if attempt > latest:
        raise InvalidArgument("attempt", f"run {run_id} has {latest} attempt(s), got {attempt}")
    return run, attempt or latest


def _open(runs_root: Path, run_id: str, attempt: int) -> int | None:
    directory = inside(runs_root, attempt_dir(runs_root, run_id, attempt), "id")
    try:
        return os.open(directory / DRIVER_LOG, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise InvalidArgument("id", f"the run's log cannot be read: {error.strerror}") from error


def _attempt_ended(get_run: Callable[[str], Run | None], run_id: str, attempt: int) -> bool:
    run = get_run(run_id)
    if run is None or run.status.terminal:
        return True
    return run.attempt.number > attempt or run.attempt.ended_at is not None


async def read_log(runs_root: Path, get_run: Callable[[str], Run | None], run_id: str, attempt: int = 0,
                   from_offset: int = 0, follow: bool = False, tail_lines: int = 0) -> AsyncIterator[LogChunk]:
    """The attempt's log in chunks, from `from_offset`, or from the start of its `tail_lines`th line from the
    end; with `follow`, what is written next too, until the attempt has ended (and its last bytes were read)."""
    _, number = checked_request(get_run, run_id, attempt, from_offset, tail_lines)
    offset, fd = from_offset, None
    try:
        if tail_lines and (fd := _open(runs_root, run_id, number)) is not None:
            offset = await _tail_start(fd, tail_lines)
        while True:
            ended = not follow or _attempt_ended(get_run, run_id, number)  # looked at before reading: no last line lost
            if fd is None:
                fd = _open(runs_root, run_id, number)
            while fd is not None and (data := os.pread(fd, CHUNK_BYTES, offset)):
                yield LogChunk(number, offset, data)
                offset += len(data)
            if ended:
                return
            await asyncio.sleep(FOLLOW_POLL_SECONDS)
    finally:
        if fd is not None:
            os.close(fd)


async def _tail_start(fd: int, lines: int) -> int:
    """tail_offset off the event loop, on a copy of `fd` the thread closes (a cancelled reader closes `fd`
    while the thread may still be reading)."""
    copy = os.dup(fd)

    def scan() -> int:
        try:
            return tail_offset(copy, lines)
        finally:
            os.close(copy)
    return await asyncio.to_thread(scan)


def tail_offset(fd: int, lines: int, block_bytes: int = CHUNK_BYTES,
                pread: Callable[[int, int, int], bytes] = os.pread) -> int:
    """Where the file's `lines`th line from the end starts (0 when it has no more lines), read backwards a
    block at a time. Its last line need not end with a newline. A newline byte is never part of a UTF-8
    character, so the offset is always at a character's start."""
    end = os.fstat(fd).st_size
    if end and pread(fd, 1, end - 1) == b"\n":
        end -= 1  # the last line's own newline
    newlines_to_pass = lines
    while end > 0:
        start = max(0, end - block_bytes)
        block = pread(fd, end - start, start)
        at = len(block)
        while (at := block.rfind(b"\n", 0, at)) >= 0:
            newlines_to_pass -= 1
            if newlines_to_pass == 0:
                return start + at + 1
        end = start
    return 0


def lead_then_tail(path: Path) -> str:
    """The log's last lines, the one saying what went wrong first: a Python traceback ends with the
    exception (`ValueError: bad input`), which would otherwise come last and be cut off in tables."""
    tail = _tail(path)
    lines = tail.split(" | ")
    lead = next((line for line in reversed(lines) if _is_exception_line(line)), "")
    return f"{lead} | {tail}" if lead and lines[0] != lead else tail


def _is_exception_line(line: str) -> bool:
    """`ValueError: bad input`, `pyspark.errors.exceptions.AnalysisException: ...`, `SystemExit: 3`."""
    name, colon, _ = line.strip().partition(":")
    last = name.rpartition(".")[2]
    return bool(colon) and bool(name) and " " not in name and last[:1].isupper() and last.isidentifier() \
        and last.endswith(("Error", "Exception", "Exit", "Interrupt", "Warning"))


def _tail(path: Path) -> str:
    """The log's last LOG_TAIL_BYTES, read from its end: it is the program's, of any size, and perhaps
    replaced by it (a link is not followed, a FIFO not waited on: "")."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return ""
    try:
        size = os.fstat(fd)
        if not stat.S_ISREG(size.st_mode):
            return ""
        data = os.pread(fd, LOG_TAIL_BYTES, max(0, size.st_size - LOG_TAIL_BYTES))
    except OSError:
        return ""
    finally:
        os.close(fd)
    lines = [line for line in data.decode(errors="replace").splitlines() if line.strip()]
    return " | ".join(lines[-5:])
