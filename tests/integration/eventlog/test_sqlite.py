"""The SQLite adapter against the event-log contract, plus what only SQLite has: a shared file."""
from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from sluice.clock import Clock, SimulatedClock
from sluice.eventlog import NO_STREAM, EventLog, WrongExpectedVersion
from sluice.eventlog.sqlite import SqliteEventLog

from tests.integration.eventlog.contract import DurableEventLogContract, EventLogContract, assert_nothing_more, new_events, take


def _file(tmp_path: Path) -> Path:
    return tmp_path / "store" / "events.db"  # a parent directory the adapter has to create


class TestSqliteFileEventLog(DurableEventLogContract):
    def make_log(self, tmp_path: Path, clock: Clock) -> EventLog:
        return SqliteEventLog(_file(tmp_path), clock=clock)

    def reopen(self, log: EventLog, tmp_path: Path, clock: Clock) -> EventLog:
        log.close()
        return SqliteEventLog(_file(tmp_path), clock=clock)


class TestSqliteMemoryEventLog(EventLogContract):
    def make_log(self, tmp_path: Path, clock: Clock) -> EventLog:
        return SqliteEventLog(":memory:", clock=clock)


async def test_another_instance_on_the_same_file_is_seen_by_polling(tmp_path: Path) -> None:
    path, clock = _file(tmp_path), SimulatedClock()
    reader = SqliteEventLog(path, clock=clock, poll_interval=0.01)
    writer = SqliteEventLog(path, clock=clock)  # stands in for another process: no in-process wake-up
    try:
        writer.append("a", new_events(2), NO_STREAM)
        subscription = reader.subscribe()
        assert [e.version for e in await take(subscription, 2)] == [0, 1]

        writer.append("a", new_events(1), 1)
        writer.append("b", new_events(2), NO_STREAM)
        live = await take(subscription, 3)
        assert [(e.stream, e.version) for e in live] == [("a", 2), ("b", 0), ("b", 1)]
        assert live == writer.read_all(after=writer.read_all()[1].position)
        await assert_nothing_more(subscription)
    finally:
        reader.close()
        writer.close()


async def test_appends_in_this_process_wake_subscribers_without_polling(tmp_path: Path) -> None:
    log = SqliteEventLog(_file(tmp_path), poll_interval=60.0)  # polling would never fire in time
    try:
        subscription = log.subscribe()
        log.append("a", new_events(1), NO_STREAM)
        assert [e.version for e in await take(subscription, 1)] == [0]
        waiting = asyncio.ensure_future(take(subscription, 1))
        await asyncio.sleep(0.05)  # let it find nothing new and park in its live wait
        assert not waiting.done()
        log.append("a", new_events(1), 0)
        assert [e.version for e in await waiting] == [1]
    finally:
        log.close()


def test_instances_on_the_same_file_serialise_their_writes(tmp_path: Path) -> None:
    logs = [SqliteEventLog(_file(tmp_path)) for _ in range(3)]  # as if three processes
    try:
        def write(log: SqliteEventLog) -> None:
            for _ in range(20):
                while True:
                    try:
                        log.append("shared", new_events(1), log.stream_version("shared"))
                        break
                    except WrongExpectedVersion:
                        continue

        threads = [threading.Thread(target=write, args=(log,)) for log in logs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        assert [e.version for e in logs[0].read_stream("shared")] == list(range(60))
        assert logs[1].read_all(limit=100) == logs[2].read_all(limit=100) == logs[0].read_stream("shared")
    finally:
        for log in logs:
            log.close()
