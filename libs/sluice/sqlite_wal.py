"""SQLite WAL checkpoints in a background thread, for the event log's and the bus's files.

In WAL mode with synchronous=NORMAL a commit does not fsync; the checkpoint that copies the WAL
back into the database file does, and by default SQLite runs it inside whichever commit takes the
WAL past 1,000 pages. Embedded, that was one commit in every ~70 notifications, each ~11 ms
longer: the bulk of e2e-latency's p99 at 200/s. Here the writer's connection turns automatic
checkpoints off and a thread, on a connection of its own, runs PASSIVE checkpoints (they wait for
no writer and no reader) every CHECKPOINT_COMMITS commits or CHECKPOINT_SECONDS, whichever comes
first. sqlite3 releases the GIL while SQLite works, so the fsync no longer holds the event loop."""
from __future__ import annotations

import logging
import sqlite3
import threading

log = logging.getLogger(__name__)

CHECKPOINT_COMMITS = 64
CHECKPOINT_SECONDS = 1.0


class WalCheckpointer:
    """Checkpoints `path`'s WAL for `writer`, whose commits the caller reports with `committed()`."""

    def __init__(self, path: str, writer: sqlite3.Connection, *, commits: int = CHECKPOINT_COMMITS,
                 seconds: float = CHECKPOINT_SECONDS) -> None:
        writer.execute("PRAGMA wal_autocheckpoint=0")
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0)
        self._every = commits
        self._seconds = seconds
        self._commits = 0
        self._due = threading.Event()
        self._stopping = False
        self.checkpoints = 0
        """Checkpoints run so far (tests)."""
        self._thread = threading.Thread(target=self._run, name="sluice-wal-checkpoints", daemon=True)
        self._thread.start()

    def committed(self) -> None:
        """One more commit through the writer (called under the writer's lock)."""
        self._commits += 1
        if self._commits >= self._every:
            self._commits = 0
            self._due.set()

    def close(self) -> None:
        """Stop the thread; the writer's own close checkpoints what is left."""
        self._stopping = True
        self._due.set()
        self._thread.join()
        self._conn.close()

    def _run(self) -> None:
        while True:
            self._due.wait(self._seconds)
            self._due.clear()
            if self._stopping:
                return
            try:
                self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                self.checkpoints += 1
            except sqlite3.Error as error:  # the next round tries again; the WAL only grows meanwhile
                log.warning("WAL checkpoint failed: %s", error)
