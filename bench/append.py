"""append: sustained appends to the event log, on a SQLite file and on a real PostgreSQL server.

Two shapes, each on a fresh log, with ~300-byte JSON events and exact expected versions:
- single: one event per append() over 100 streams in turn (a registry change, a launcher's run
  transition): appends/s, i.e. transactions/s.
- batched: the batching the services chose (runtime.aggregates.execute_batch, the matcher's and
  the checker's handlers): one append_batch per bus poll, here 50 streams x 2 events with the
  poll's consumed-offset checkpoint in the same transaction: events/s.

SQLite runs in WAL mode with synchronous=NORMAL, as the adapter opens it. PostgreSQL is started
from the installed binaries the way the tests start it (tests.support.postgres: fsync and
synchronous_commit off), so its figures are what the adapter and the protocol cost, not a disk's
flush latency. Each run measures after WARM_UP appends.

Sizes: BENCH_APPENDS single appends (default 2,000), BENCH_BATCHES batches (default 200).
"""
from __future__ import annotations

import json
import tempfile
import time
import uuid
from pathlib import Path
from typing import Callable

from bench import Figure, option, progress
from sluice.eventlog.port import NO_STREAM, Checkpoint, EventLog, NewEvent, StreamAppend

DESCRIPTION = ("sustained appends on SQLite and PostgreSQL: single events (appends/s) and the services' batches "
               "(events/s)")
DEFAULT_APPENDS = 2_000
DEFAULT_BATCHES = 200
STREAMS = 100
BATCH_STREAMS = 50
EVENTS_PER_STREAM = 2
WARM_UP = 50


def run(options: object) -> list[Figure]:
    appends = option(options, "appends", DEFAULT_APPENDS)
    batches = option(options, "batches", DEFAULT_BATCHES)
    figures = []
    with tempfile.TemporaryDirectory(prefix="sluice-bench-append-") as directory:
        for backend, backend_logs in (("sqlite", _sqlite(Path(directory))), ("postgres", _postgres())):
            with backend_logs as make:
                single = _single(make(), appends)
                batched = _batched(make(), batches)
            progress(f"[append] {backend}: {single:,.0f} appends/s single, {batched:,.0f} events/s batched")
            figures += [Figure(f"{backend}_single_appends_per_s", single, "appends/s"),
                        Figure(f"{backend}_batched_events_per_s", batched, "events/s")]
    return figures


def _single(log: EventLog, appends: int) -> float:
    versions = [NO_STREAM] * STREAMS
    try:
        def append(index: int) -> None:
            stream = index % STREAMS
            versions[stream] = log.append(f"bench-{stream}", [_event(index)], versions[stream])
        return _rate(append, appends, per_call=1)
    finally:
        log.close()


def _batched(log: EventLog, batches: int) -> float:
    versions: dict[str, int] = {}
    try:
        def append(index: int) -> None:
            streams = [f"matcher-{(index * BATCH_STREAMS + n) % 5000}" for n in range(BATCH_STREAMS)]
            appends = [StreamAppend(s, [_event(index, n) for n in range(EVENTS_PER_STREAM)], versions.get(s, NO_STREAM))
                       for s in streams]
            new_versions = log.append_batch(appends, checkpoints=[Checkpoint("bench:matches:0", index + 1)])
            versions.update(zip(streams, new_versions))
        return _rate(append, batches, per_call=BATCH_STREAMS * EVENTS_PER_STREAM)
    finally:
        log.close()


def _rate(append: Callable[[int], None], calls: int, per_call: int) -> float:
    for index in range(WARM_UP):
        append(index)
    started = time.perf_counter()
    for index in range(WARM_UP, WARM_UP + calls):
        append(index)
    return calls * per_call / (time.perf_counter() - started)


def _event(index: int, n: int = 0) -> NewEvent:
    data = json.dumps({"job_id": f"job-{index}-{n}", "notification": {
        "id": str(uuid.uuid4()), "time": "2026-11-23T17:00:00+00:00",
        "payload": {"namespace": "bench", "dataset": "clicks", "partitions": [
            {"key": {"hour": str(index % 24)}, "location": f"/data/bench/clicks/{index}", "size_bytes": 1000}]}},
        "at": "2026-11-23T17:00:00+00:00"}).encode()
    return NewEvent(str(uuid.uuid4()), "NotificationMatched", data)


class _sqlite:
    def __init__(self, directory: Path) -> None:
        self._directory = directory

    def __enter__(self) -> Callable[[], EventLog]:
        from sluice.eventlog.sqlite import SqliteEventLog

        return lambda: SqliteEventLog(self._directory / f"{uuid.uuid4().hex}.db")

    def __exit__(self, *exc: object) -> None:
        pass


class _postgres:
    def __enter__(self) -> Callable[[], EventLog]:
        from sluice.eventlog.postgres import PostgresEventLog
        from tests.support.postgres import PostgresServer

        self._server = PostgresServer().start()
        return lambda: PostgresEventLog(self._server.create_database())

    def __exit__(self, *exc: object) -> None:
        self._server.stop()
