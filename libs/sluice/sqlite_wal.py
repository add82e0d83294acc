"""SQLite WAL checkpoints in a background thread, for the event log's and the bus's files.

In WAL mode with synchronous=NORMAL a commit does not fsync; the checkpoint that copies the WAL
back into the database file does, and by default SQLite runs it inside whichever commit takes the
WAL past 1,000 pages. Embedded, that made one commit in every few dozen notifications much
longer: the bulk of embedded mode's tail latency (docs/decisions.md). Here the writer's connection turns automatic
checkpoints off and a thread, on a connection of its own, runs a PASSIVE checkpoint (it waits for
no writer and no reader) after commits, at most one every CHECKPOINT_INTERVAL seconds (one every
few dozen commits cost more CPU than the stalls it saved).
sqlite3 releases the GIL while SQLite works, so the fsync no longer holds the event loop."""
from __future__ import annotations

import logging
import sqlite3
import threading

log = logging.getLogger(__name__)

CHECKPOINT_INTERVAL = 0.1


class WalCheckpointer:
    """Checkpoints `path`'s WAL for `writer`, whose commits the caller reports with `committed()`."""

    def __init__(self, path: str, writer: sqlite3.Connection, *, interval: float = CHECKPOINT_INTERVAL) -> None:
        writer.execute("PRAGMA wal_autocheckpoint=0")
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0)
        self._interval = interval
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
            except sqlite3.Error as error:  # the next round tries again; the WAL only grows meanwhile
                log.warning("WAL checkpoint failed: %s", error)
            if self._stopping.wait(self._interval):
                return
