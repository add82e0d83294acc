"""The SQLite storage of the in-process bus, and what the bus knows of each partition's end.

Kept apart from `sluice.bus.inprocess` (groups, assignment, polling) so each stays small; nothing
outside the in-process bus uses it.
"""
from __future__ import annotations

import contextlib
import math
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence

import orjson

from sluice.bus.port import Record, TopicPartition, TopicSpec
from sluice.sqlite_wal import WalCheckpointer, open_wal, private_database

__all__ = ["BusStore", "EndOffsets", "Headers"]

Headers = tuple[tuple[str, bytes], ...]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS topics (
    name TEXT PRIMARY KEY, partitions INTEGER NOT NULL, compacted INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS records (
    topic TEXT NOT NULL, "partition" INTEGER NOT NULL, "offset" INTEGER NOT NULL,
    key BLOB, value BLOB NOT NULL, headers TEXT NOT NULL, timestamp_ms INTEGER NOT NULL,
    PRIMARY KEY (topic, "partition", "offset"));
CREATE TABLE IF NOT EXISTS offsets (
    group_id TEXT NOT NULL, topic TEXT NOT NULL, "partition" INTEGER NOT NULL, next_offset INTEGER NOT NULL,
    PRIMARY KEY (group_id, topic, "partition"));
"""


class BusStore:
    """The SQLite tables; each call holds a lock, so threads may share one store.

    A file has two connections: writes (transactions) on one, reads on the other, each under its
    own lock, so a read never waits for a write's fsync (WAL readers see the last commit). An
    in-memory database is one connection (a second would be another database)."""

    def __init__(self, path: str | os.PathLike | None) -> None:
        self._lock = threading.Lock()
        target = ":memory:" if path is None else os.fspath(path)
        if path is not None:
            private_database(target)
        self._db = sqlite3.connect(target, isolation_level=None, check_same_thread=False, timeout=30.0)
        self._checkpointer: WalCheckpointer | None = None
        self.durable = path is not None
        """Whether a write waits for an fsync (a file): then it is worth doing off the event loop."""
        if path is not None:
            open_wal(self._db)  # synchronous=FULL: see sluice.sqlite_wal
            self._checkpointer = WalCheckpointer(target, self._db)
        self._db.executescript(_SCHEMA)
        self._reader, self._read_lock = self._db, self._lock
        if path is not None:
            self._reader = sqlite3.connect(target, isolation_level=None, check_same_thread=False, timeout=30.0)
            self._read_lock = threading.Lock()
        self._written_ends: dict[TopicPartition, int] = {}
        """Next offset of the partitions this store appended to, valid while no other connection has
        committed to the file since (`_written_version`): an append then needs no MAX query for them."""
        self._written_version: int | None = None

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")  # takes the write lock: offsets stay contiguous across processes
            try:
                yield self._db
            except BaseException:
                self._written_ends, self._written_version = {}, None
                self._db.execute("ROLLBACK")
                raise
            try:
                self._db.execute("COMMIT")
            except BaseException:
                self._written_ends, self._written_version = {}, None
                raise
            if self._checkpointer is not None:
                self._checkpointer.committed()

    def _query(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._read_lock:
            return self._reader.execute(sql, args).fetchall()

    def create_topics(self, specs: Sequence[TopicSpec]) -> None:
        with self._transaction() as db:
            db.executemany(
                "INSERT OR IGNORE INTO topics VALUES (?, ?, ?)",
                [(s.name, s.partitions, int(s.compacted)) for s in specs],
            )

    def topic(self, name: str) -> TopicSpec | None:
        rows = self._query("SELECT partitions, compacted FROM topics WHERE name = ?", (name,))
        return TopicSpec(name, rows[0][0], bool(rows[0][1])) if rows else None

    def append(self, records: Sequence[tuple[TopicPartition, bytes | None, bytes, Headers]], timestamp_ms: int) -> list[int]:
        """(partition, key, value, headers) of each record, in one transaction; their offsets."""
        offsets: list[int] = []
        with self._transaction() as db:
            # Under the write lock: the connection's data_version moves only when another connection (another
            # process, another bus on the file) committed since it last looked, and no one can commit now.
            (version,) = db.execute("PRAGMA data_version").fetchone()
            ends = self._written_ends if version == self._written_version else {}
            for tp, key, value, headers in records:
                offset = ends.get(tp)
                if offset is None:  # another process may have appended
                    (offset,) = db.execute(
                        'SELECT COALESCE(MAX("offset") + 1, 0) FROM records WHERE topic = ? AND "partition" = ?',
                        (tp.topic, tp.partition),
                    ).fetchone()
                ends[tp] = offset + 1
                offsets.append(offset)
            db.executemany(
                "INSERT INTO records VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(tp.topic, tp.partition, offset, key, value, dump_headers(headers), timestamp_ms)
                 for (tp, key, value, headers), offset in zip(records, offsets)],
            )
            self._written_ends, self._written_version = ends, version  # forgotten if the commit fails
        return offsets

    def read(self, tp: TopicPartition, start: int, limit: int) -> list[Record]:
        rows = self._query(
            'SELECT "offset", key, value, headers, timestamp_ms FROM records'
            ' WHERE topic = ? AND "partition" = ? AND "offset" >= ? ORDER BY "offset" LIMIT ?',
            (tp.topic, tp.partition, start, limit),
        )
        return [Record(tp.topic, tp.partition, o, k, v, _load_headers(h), ts) for o, k, v, h, ts in rows]

    def ends(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """The next offset of each partition, in one query. An index lookup per partition: a
        GROUP BY over the records would scan every record of the topics."""
        if not partitions:
            return {}
        wanted = ", ".join(["(?, ?)"] * len(partitions))
        rows = self._query(
            f"WITH wanted(topic, part) AS (VALUES {wanted})"
            ' SELECT topic, part, (SELECT COALESCE(MAX("offset") + 1, 0) FROM records'
            '  WHERE records.topic = wanted.topic AND records."partition" = wanted.part) FROM wanted',
            tuple(v for tp in partitions for v in (tp.topic, tp.partition)),
        )
        return {TopicPartition(topic, partition): end for topic, partition, end in rows}

    def data_version(self) -> int:
        """Changes whenever another connection (another process, another bus on the same file, or
        this store's writing connection) commits to the file."""
        return self._query("PRAGMA data_version")[0][0]

    def committed(self, group_id: str, tp: TopicPartition) -> int | None:
        rows = self._query(
            'SELECT next_offset FROM offsets WHERE group_id = ? AND topic = ? AND "partition" = ?',
            (group_id, tp.topic, tp.partition),
        )
        return rows[0][0] if rows else None

    def commit(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        with self._transaction() as db:
            db.executemany(
                'INSERT INTO offsets VALUES (?, ?, ?, ?) ON CONFLICT (group_id, topic, "partition")'
                " DO UPDATE SET next_offset = excluded.next_offset",
                [(group_id, tp.topic, tp.partition, offset) for tp, offset in offsets.items()],
            )

    def close(self) -> None:
        with self._lock, self._read_lock if self._reader is not self._db else contextlib.nullcontext():
            if self._checkpointer is not None:
                self._checkpointer.close()
                self._checkpointer = None
            if self._reader is not self._db:
                self._reader.close()
            self._db.close()


class EndOffsets:
    """The end (next offset) of each partition of the tracked topics, as far as this bus knows.

    Never above the true end, so a consumer that reads only partitions whose known end is beyond
    its position misses nothing, at worst it sees a record late. This bus's appends raise it at
    once; `refresh` reads the file again when another connection committed since the last one
    (PRAGMA data_version), which a poll does when its wait ran out without a send and at least
    every `interval` -- the delay with which another process's records are seen.
    """

    def __init__(self, store: BusStore, interval: float) -> None:
        self._store = store
        self._interval = interval
        self._ends: dict[TopicPartition, int] = {}
        self._partitions: dict[str, int] = {}  # tracked topic -> its partition count
        self._version: int | None = None  # data_version at the last refresh
        self._refreshed_at = -math.inf
        self._lock = threading.Lock()  # appends may come from other threads

    def end(self, tp: TopicPartition) -> int:
        return self._ends.get(tp, 0)

    def raise_to(self, ends: Mapping[TopicPartition, int]) -> None:
        with self._lock:
            for tp, end in ends.items():
                if end > self._ends.get(tp, 0):
                    self._ends[tp] = end

    def track(self, partitions: Mapping[str, int]) -> None:
        """Topics (-> partition count) whose ends `refresh` keeps; a new one is read at once."""
        new = {topic: count for topic, count in partitions.items() if self._partitions.get(topic) != count}
        if new:
            self._partitions.update(new)
            self.raise_to(self._store.ends(_all_partitions(new)))

    def refresh(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._refreshed_at < self._interval:
            return
        self._refreshed_at = now
        version = self._store.data_version()  # before the read: a commit after it is seen next time
        if version != self._version:
            self._version = version
            self.raise_to(self._store.ends(_all_partitions(self._partitions)))


def _all_partitions(partitions: Mapping[str, int]) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for topic, count in partitions.items() for p in range(count)]


def dump_headers(headers: Iterable[tuple[str, bytes]]) -> str:
    if not headers:
        return _NO_HEADERS
    return orjson.dumps([[name, bytes(value).hex()] for name, value in headers]).decode()


def _load_headers(text: str) -> tuple[tuple[str, bytes], ...]:
    if text == _NO_HEADERS:
        return ()
    return tuple((name, bytes.fromhex(value)) for name, value in orjson.loads(text))


_NO_HEADERS = "[]"
