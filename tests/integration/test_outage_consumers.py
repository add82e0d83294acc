"""A valid notification that arrives while the event log cannot write is not dead-lettered (issue 25): the
matcher's consumer pauses on it, the service says NOT ready, and once the log writes again the same
record is handled and its job fires. Real SQLite log, in-process bus, the services as in embedded mode."""
from __future__ import annotations

import asyncio

import pytest

from sluice.bus.inprocess import InProcessBus
from sluice.bus.topics import DEAD_LETTER, JOBS, PARTITION_NOTIFICATIONS
from sluice.eventlog.port import EventLogUnavailable
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.runtime.health import Health
from sluice.runtime.service import run_services
from sluice.v1 import jobs_pb2
from sluice_services.composition import matcher_spec, registry_spec
from sluice_services.streams import schedule_recorded
from sluice_services.registry.service import RegistryService
from tests.integration.test_dead_letter import CLOCK, SCHEDULE, valid_notification
from tests.support.waiting import until

pytestmark = pytest.mark.integration


class Switchable:
    """The log, with its appends failing as PostgreSQL's do during an outage while `down` is set."""

    def __init__(self, log: SqliteEventLog) -> None:
        self._log = log
        self.down = False
        self.refused = 0

    def append_batch(self, appends, *, checkpoints=()):
        if self.down:
            self.refused += 1
            raise EventLogUnavailable("PostgreSQL unavailable (append): the server is restarting")
        return self._log.append_batch(appends, checkpoints=checkpoints)

    def __getattr__(self, name):
        return getattr(self._log, name)


def read_only(log: SqliteEventLog, on: bool) -> None:
    """The real file refuses writes (SQLITE_READONLY), as a read-only disk or a failed-over replica would."""
    with log._lock:
        log._conn.execute(f"PRAGMA query_only={'ON' if on else 'OFF'}")


async def records(bus, topic: str, group: str, timeout: float) -> list:
    consumer = bus.consumer(group, [topic])
    found = await consumer.poll(timeout=timeout)
    await consumer.close()
    return found


@pytest.mark.parametrize("outage", ["sqlite read-only", "EventLogUnavailable"])
async def test_a_notification_during_an_outage_waits_and_fires_once_the_log_writes_again(tmp_path, outage):
    sqlite_log = SqliteEventLog(tmp_path / "events.db", clock=CLOCK)
    RegistryService(sqlite_log, CLOCK).create(SCHEDULE)
    log = Switchable(sqlite_log)
    bus = InProcessBus()
    producer = bus.producer()
    health = Health()
    stop = asyncio.Event()
    ready = asyncio.get_running_loop().create_future()
    specs = [registry_spec(log, CLOCK, producer), matcher_spec(log, CLOCK, producer)]
    task = asyncio.create_task(run_services(specs, bus, log, on_ready=ready.set_result, stop=stop, health=health))
    await asyncio.wait_for(ready, 10)
    await until(lambda: schedule_recorded(sqlite_log, SCHEDULE.id), "the schedule observed", timeout=10)
    await until(health.ready, "the service ready", timeout=10)

    if outage == "sqlite read-only":
        read_only(sqlite_log, True)
    else:
        log.down = True
    await producer.send(PARTITION_NOTIFICATIONS, valid_notification(), key=b"partition:experiments.clickstream")
    await until(lambda: not health.ready(), "the service not ready while its log refuses writes", timeout=10)
    assert "log or bus unreachable" in health.why_not_ready()
    await asyncio.sleep(1.5)  # well past the old 5 tries in ~1.5 s
    assert await records(bus, JOBS, "probe-jobs-early", 0.1) == []

    if outage == "sqlite read-only":
        read_only(sqlite_log, False)
    else:
        log.down = False
        assert log.refused >= 3
    triggered = await records(bus, JOBS, "probe-jobs", 15)
    assert [n.id for n in jobs_pb2.JobTriggered.FromString(triggered[0].value).job.context.notifications] == ["n-ok"]
    await until(health.ready, "the service ready again once the log writes", timeout=15)
    assert await records(bus, DEAD_LETTER, "probe-dead", 0.2) == []

    stop.set()
    await task
    await producer.close()
    await bus.close()
    sqlite_log.close()
