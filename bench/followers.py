"""followers: what this process's followers of a SqliteEventLog cost per append.

Seven subscribers follow one log file, as the services of an embedded stack do (outbox relays
filtered by their service's stream prefixes, a read model over two, one unfiltered). The driver
appends one event at a time to streams of four categories in turn and waits until every follower
whose filter takes it has received it, so each append is followed alone, as at a low rate.

Figures: process CPU per append (the append and everything the followers do for it) and appends
per second. The followers' reads of the file are counted and printed: with the in-memory tail of
this process's commits (sluice.eventlog.subscription.Tail) they are ~0 once followers are live.
"""
from __future__ import annotations

import asyncio
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench import Figure, option, progress
from sluice.eventlog import NO_STREAM, NewEvent
from sluice.eventlog.port import in_streams
from sluice.eventlog.sqlite import SqliteEventLog

DESCRIPTION = "in-process followers of a SqliteEventLog: process CPU per append with 7 subscribers"
DEFAULT_APPENDS = 3_000
CATEGORIES = ("schedule-", "matcher-", "checker-", "run-")
FOLLOWERS: tuple[tuple[str, ...], ...] = (
    ("schedule-",), ("matcher-",), ("checker-",), ("run-",), ("matcher-", "checker-"), ("schedule-",), ())


class _CountingReads:
    """The log's connection, counting the statements that read events (SELECT ... FROM events)."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self.reads = 0

    def execute(self, sql: str, params: Any = ()) -> Any:
        if sql.startswith("SELECT") and "FROM events" in sql:
            self.reads += 1
        return self._conn.execute(sql, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def run(options: object) -> list[Figure]:
    appends = option(options, "notifications", DEFAULT_APPENDS)
    with tempfile.TemporaryDirectory(prefix="sluice-bench-followers-") as tmp:
        cpu, wall, reads = asyncio.run(_measure(Path(tmp) / "events.db", appends))
    progress(f"[followers] {appends} appends, {len(FOLLOWERS)} followers: CPU {cpu:.2f} s over {wall:.2f} s, "
             f"{reads} reads of the file by followers ({reads / appends:.2f} per append)")
    return [Figure("cpu_per_append", cpu / appends * 1e6, "us"), Figure("appends_per_s", appends / wall, "appends/s")]


async def _measure(path: Path, appends: int) -> tuple[float, float, int]:
    log = SqliteEventLog(path, poll_interval=1.0)
    received = [0] * len(FOLLOWERS)
    progressed = asyncio.Condition()

    async def follow(index: int, prefixes: tuple[str, ...]) -> None:
        async for batch in log.subscribe_batches(0, prefixes):
            received[index] += len(batch)
            async with progressed:
                progressed.notify_all()

    tasks = [asyncio.ensure_future(follow(index, prefixes)) for index, prefixes in enumerate(FOLLOWERS)]
    expected = [0] * len(FOLLOWERS)
    versions: dict[str, int] = {}
    counting = _CountingReads(log._conn)
    log._conn = counting
    try:
        cpu, wall = time.process_time(), time.perf_counter()
        for n in range(appends):
            stream = f"{CATEGORIES[n % len(CATEGORIES)]}{n % 50}"
            version = versions.get(stream, NO_STREAM)
            log.append(stream, [NewEvent(str(uuid.uuid4()), "Happened", b'{"n": 1}')], version)
            versions[stream] = version + 1
            expected = [count + in_streams(stream, prefixes) for count, prefixes in zip(expected, FOLLOWERS)]
            async with progressed:
                await progressed.wait_for(lambda: received == expected)
        return time.process_time() - cpu, time.perf_counter() - wall, counting.reads
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        log.close()
