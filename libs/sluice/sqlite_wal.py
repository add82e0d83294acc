"""SQLite WAL mode, durability and checkpoints in a background thread, for the event log's and the bus's files.

Both files are opened by `open_wal` with synchronous=FULL (issue 25): every commit fsyncs the WAL
before it returns, so a commit that returned survives a power loss. With NORMAL, a bus offset
committed after its handler's events (or a relay's saved position after its send) could survive
while the other file lost what came first: the two files are two databases, so only each commit
being durable on its own keeps their order. The cost is in docs/decisions.md. The event log's appends
in a `sluice.eventlog.deferred` block commit with NORMAL instead and are fsynced after the fact
(`WalFsync`, the flush of a sluice.eventlog.group_commit.GroupCommit), held back from everything outside
the process until then: the order holds the same way.

Checkpoints copy the WAL back into the database file; by default SQLite runs one inside whichever
commit takes the WAL past 1,000 pages. Embedded, that made one commit in every few dozen notifications much
longer: the bulk of embedded mode's tail latency (docs/decisions.md). Here the writer's connection turns automatic
checkpoints off and a thread, on a connection of its own, runs a PASSIVE checkpoint (it waits for
no writer and no reader) after commits, at most one every CHECKPOINT_INTERVAL seconds (one every
few dozen commits cost more CPU than the stalls it saved).
sqlite3 releases the GIL while SQLite works, so the fsync no longer holds the event loop.
A PASSIVE checkpoint never shrinks the WAL file: once it is larger than `truncate_above` bytes, or
every TRUNCATE_SECONDS, the thread runs a TRUNCATE checkpoint (it waits at most TRUNCATE_WAIT_MS
for readers and writers; one that cannot finish is tried again after the next commit)."""
from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time

from sluice.eventlog.deferred import DurabilityLost

log = logging.getLogger(__name__)

CHECKPOINT_INTERVAL = 0.1
SYNCHRONOUS = "FULL"
"""The event log's and the bus's synchronous mode (see the module docstring)."""
TRUNCATE_ABOVE = 16 * 1024 * 1024
"""A WAL file larger than this (bytes) is truncated by the next checkpoint."""
TRUNCATE_SECONDS = 60.0
"""At least this often a checkpoint truncates a WAL that is not empty."""
TRUNCATE_WAIT_MS = 200
"""How long a TRUNCATE checkpoint waits for readers and writers before it gives up for the round."""


def private_database(path: str) -> None:
    """The database file, and its WAL and shared-memory files if there, readable by their owner only (0600):
    made before SQLite makes it with the umask's mode (0644: any local user, and any program a launcher
    runs as another user, read every event), an existing one's mode narrowed. SQLite gives the WAL and
    shared-memory files it makes the database file's mode."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        pass
    for file in (path, f"{path}-wal", f"{path}-shm"):
        try:
            status = os.stat(file)
            if status.st_mode & 0o077 and status.st_uid == os.geteuid():
                os.chmod(file, status.st_mode & 0o700)
        except FileNotFoundError:
            pass


def open_wal(conn: sqlite3.Connection) -> None:
    """WAL mode with every commit durable when it returns (synchronous=FULL)."""
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={SYNCHRONOUS}")


class WalCheckpointer:
    """Checkpoints `path`'s WAL for `writer`, whose commits the caller reports with `committed()`."""

    def __init__(self, path: str, writer: sqlite3.Connection, *, interval: float = CHECKPOINT_INTERVAL,
                 truncate_above: int = TRUNCATE_ABOVE, truncate_every: float = TRUNCATE_SECONDS) -> None:
        writer.execute("PRAGMA wal_autocheckpoint=0")
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0)
        self._wal = f"{path}-wal"
        self._interval = interval
        self._truncate_above = truncate_above
        self._truncate_every = truncate_every
        self._truncated_at = time.monotonic()
        self.truncations = 0
        """TRUNCATE checkpoints that emptied the WAL file (tests)."""
        self._committed = threading.Event()
        self._stopping = threading.Event()
        self.checkpoints = 0
        """Checkpoints run so far (tests)."""
        self._thread = threading.Thread(target=self._run, name="sluice-wal-checkpoints", daemon=True)
        self._thread.start()

    def committed(self) -> None:
        """The writer committed: a checkpoint is due (at the latest one interval after the last)."""
        self._committed.set()

    def close(self) -> None:
        """Stop the thread; the writer's own close checkpoints what is left."""
        self._stopping.set()
        self._committed.set()
        self._thread.join()
        self._conn.close()

    def _run(self) -> None:
        while True:
            self._committed.wait()
            if self._stopping.is_set():
                return
            self._committed.clear()
            try:
                self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                self.checkpoints += 1
                if self._truncate_due():
                    self._truncate()
            except sqlite3.Error as error:  # the next round tries again; the WAL only grows meanwhile
                log.warning("WAL checkpoint failed: %s", error)
            if self._stopping.wait(self._interval):
                return

    def _truncate_due(self) -> bool:
        try:
            size = os.path.getsize(self._wal)
        except OSError:
            return False
        return size > self._truncate_above or (size > 0 and time.monotonic() - self._truncated_at >= self._truncate_every)

    def _truncate(self) -> None:
        """A TRUNCATE checkpoint, waiting at most TRUNCATE_WAIT_MS for others (it holds writers back while it waits)."""
        self._conn.execute(f"PRAGMA busy_timeout={TRUNCATE_WAIT_MS}")
        try:
            busy, _, _ = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        finally:
            self._conn.execute("PRAGMA busy_timeout=30000")
        if not busy:
            self._truncated_at = time.monotonic()
            self.truncations += 1


class WalFsync:
    """The flush of an event log's deferred commits (sluice.eventlog.group_commit): a commit made with
    synchronous=NORMAL is in the WAL file (the OS's cache) when it returns, and an fdatasync of the file
    that starts after it makes it durable."""

    def __init__(self, path: str) -> None:
        self._wal = f"{path}-wal"
        self._fd: int | None = None

    def __call__(self, makers: list[None]) -> None:
        """fdatasync the WAL (its commits have no makers to check)."""
        try:
            if self._fd is None or os.fstat(self._fd).st_ino != os.stat(self._wal).st_ino:
                self._close_fd()
                self._fd = os.open(self._wal, os.O_RDONLY)  # never written through: SQLite writes the WAL
            os.fdatasync(self._fd)
        except OSError as error:
            raise DurabilityLost(f"fsync of {self._wal} failed: {error}") from None

    def _close_fd(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def close(self) -> None:
        self._close_fd()
