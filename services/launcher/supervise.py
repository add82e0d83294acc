"""The wrapper a program is started through, so that its start and its exit status outlive the
launcher: `python supervise.py ATTEMPT_DIR [--as UID:GID] -- COMMAND...`. Standard library only (it is run by
path, with `-I -S`, to start fast).

With `--as UID:GID` the program runs as that user (the wrapper stays the launcher's, and writes
what follows; the directory may be the program's, so nothing is opened through a link there).

1. It claims the attempt: `spawned` ("<pid> <start ticks>") appears in ATTEMPT_DIR atomically and
   only if it did not exist (a link of a complete temporary file). A second wrapper for the same
   attempt (a restarted launcher that could not know whether the first one got this far) finds it
   and exits with CLAIMED, having started nothing.
2. It runs COMMAND, forwarding SIGTERM/SIGINT to it. It is the child subreaper of what COMMAND
   starts: a descendant that left the process group (setsid, its parent gone: a daemon's double
   fork) is reparented to the wrapper, not to init, and stays findable (`descendants`).
3. Once COMMAND has ended, it kills every descendant left (SIGKILL) and reaps them.
4. It writes COMMAND's exit code to `exit_code` atomically (temporary file, rename), then exits
   with that code (128 + N when COMMAND was killed by signal N).
"""
from __future__ import annotations

import os
import signal
import sys
import time

SPAWNED = "spawned"
EXIT_CODE = "exit_code"
CLAIMED = 75
PR_SET_CHILD_SUBREAPER = 36


def process_start_ticks(pid: int | str) -> int | None:
    """The process's start time in clock ticks after boot (field 22 of /proc/<pid>/stat), None
    when there is no such process. With the pid it names one process: pids are reused, this is not."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[19])


def descendants(pid: int) -> list[int]:
    """The processes below `pid` by parent, read from /proc at once (children before their children)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as stat:
                    parent = int(stat.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):  # ended while /proc was read
                continue
            children.setdefault(parent, []).append(int(entry))
    found, pending = [], children.get(pid, [])
    while pending:
        found += pending
        pending = [grandchild for child in pending for grandchild in children.get(child, ())]
    return found


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _become_subreaper() -> None:
    try:
        import ctypes  # here: only the wrapper pays its import
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: what leaves the group goes to init, as before
        pass


def _end_descendants() -> None:
    """Kill what is left below this process and reap it: killed parents hand their children to this
    subreaper, a child forked while the kill was under way is found by the next look."""
    while True:
        kill_all(descendants(os.getpid()))
        try:
            while (ended := os.waitpid(-1, os.WNOHANG)[0]) > 0:
                pass
        except ChildProcessError:  # no child left
            return
        if ended == 0:
            time.sleep(0.01)


def _become(uid: int, gid: int) -> None:
    """This process drops to the program's user: no supplementary groups, then the group, then the user."""
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)


def _write_atomically(path: str, text: str, exclusive: bool) -> bool:
    temporary = f"{path}.{os.getpid()}.tmp"
    try:  # made here, never opened through what a program left (a link would write where it points)
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except FileExistsError:
        os.unlink(temporary)
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    try:
        if exclusive:
            os.link(temporary, path)
        else:
            os.replace(temporary, path)
    except FileExistsError:
        return False
    finally:
        if exclusive:
            os.unlink(temporary)
    return True


def main(argv: list[str]) -> int:
    switch = None
    if len(argv) >= 3 and argv[1] == "--as":  # UID:GID the program runs as
        try:
            switch = tuple(int(number) for number in argv[2].split(":"))
        except ValueError:
            switch = ()
        argv = [argv[0], *argv[3:]]
    if len(argv) < 3 or argv[1] != "--" or (switch is not None and len(switch) != 2):
        print("usage: supervise.py ATTEMPT_DIR [--as UID:GID] -- COMMAND...", file=sys.stderr)
        return 2
    attempt_dir, command = argv[0], argv[2:]
    claim = f"{os.getpid()} {process_start_ticks('self')}\n"
    if not _write_atomically(os.path.join(attempt_dir, SPAWNED), claim, exclusive=True):
        print(f"supervise: {attempt_dir} was already started by another launcher", file=sys.stderr)
        return CLAIMED
    _become_subreaper()
    child = os.fork()  # not subprocess: importing it doubles the wrapper's start time
    if child == 0:
        try:
            if switch is not None:
                _become(*switch)
                os.chdir(attempt_dir)  # the launcher's may be out of its reach
            os.execvp(command[0], command)
        except OSError as error:
            print(f"supervise: cannot start {command[0]}: {error}", file=sys.stderr)
        os._exit(127)
    def forward(number: int, _frame: object) -> None:
        try:
            os.kill(child, number)
        except ProcessLookupError:  # already reaped: a signal to its whole group (a cancel) got it first
            pass

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, forward)
    while (ended := os.wait())[0] != child:  # orphans reparented here are reaped as they end
        pass
    code = os.waitstatus_to_exitcode(ended[1])
    _end_descendants()
    _write_atomically(os.path.join(attempt_dir, EXIT_CODE), f"{code}\n", exclusive=False)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
