"""`sluice_consumer_lag_records` follows a consumer: above zero while its handler is held and records pile
up behind it, by the exact count on their partition, and back to zero once it catches up (in one process,
on the in-process bus, read through the registry run_services reports to, as /metrics renders it)."""
from __future__ import annotations

import asyncio

import pytest

from sluice.bus.inprocess import InProcessBus
from sluice.bus.topics import PARTITION_NOTIFICATIONS
from sluice.clock import SimulatedClock
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.runtime.consumer import Subscription
from sluice.runtime.metrics import Registry
from sluice.runtime.service import ServiceSpec, run_services
from tests.integration.test_metrics_endpoint import samples, total, value
from tests.support.waiting import until

pytestmark = pytest.mark.integration

PROBE = {"topic": PARTITION_NOTIFICATIONS, "group": "probe", "service": "probe"}
BEHIND = 5


async def samples_once(registry: Registry, done, timeout: float = 20):
    """The registry's samples, as /metrics renders them, once `done` holds of them."""
    def probe():
        found = samples(registry.render())
        return (found,) if done(found) else None
    (found,) = await until(probe, "the consumer metrics", timeout=timeout, interval=0.05)
    return found


async def test_consumer_lag_rises_while_the_consumer_is_held_and_falls_to_zero_after(tmp_path):
    entered, release = asyncio.Event(), asyncio.Event()

    async def handler(record) -> None:
        if record.value == b"hold":
            entered.set()
            await release.wait()

    registry, clock, stop = Registry(), SimulatedClock(), asyncio.Event()
    log, bus = SqliteEventLog(tmp_path / "events.db", clock=clock), InProcessBus()
    spec = ServiceSpec("probe", [Subscription("probe", {PARTITION_NOTIFICATIONS: handler})])
    ready = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(run_services([spec], bus, log, on_ready=ready.set_result, stop=stop, metrics=registry))
    await asyncio.wait_for(ready, 10)
    producer = bus.producer()
    try:
        await producer.send(PARTITION_NOTIFICATIONS, b"hold", key=b"one-key")
        await asyncio.wait_for(entered.wait(), 20)
        before = samples(registry.render())
        assert total(before, "sluice_consumer_lag_records", **PROBE) == 0
        for index in range(BEHIND):
            await producer.send(PARTITION_NOTIFICATIONS, f"queued-{index}".encode(), key=b"one-key")
        held = await samples_once(registry, lambda f: total(f, "sluice_consumer_lag_records", **PROBE) == BEHIND)
        assert value(held, "sluice_consumer_messages_total", **PROBE) == 0     # the first is still being handled
        assert max(v for (name, labels), v in held.items()
                   if name == "sluice_consumer_lag_records" and set(PROBE.items()) <= labels) == BEHIND

        release.set()
        await samples_once(registry, lambda f: value(f, "sluice_consumer_messages_total", **PROBE) == BEHIND + 1)
        after = await samples_once(registry, lambda f: total(f, "sluice_consumer_lag_records", **PROBE) == 0)
        assert all(v == 0 for (name, labels), v in after.items()
                   if name == "sluice_consumer_lag_records" and set(PROBE.items()) <= labels)
    finally:
        release.set()
        stop.set()
        await task
        await producer.close()
        log.close()
