"""Embedded mode: services in one process on the SQLite event log and the in-process bus under data_dir."""
from __future__ import annotations

import asyncio
from typing import Callable

from sluice.bus.inprocess import InProcessBus
from sluice.clock import Clock, SystemClock
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.runtime.service import run_services
from sluice_services.composition import SERVICES, Settings, build


async def run_embedded(
    settings: Settings,
    names: tuple[str, ...] = SERVICES,
    *,
    clock: Clock | None = None,
    on_ready: Callable[[int], None] = lambda port: None,
    stop: asyncio.Event | None = None,
) -> None:
    clock = clock or SystemClock()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    log = SqliteEventLog(settings.data_dir / "events.db", clock=clock)
    bus = InProcessBus(settings.data_dir / "bus.db", clock=clock)
    producer = bus.producer()
    try:
        specs = build(names, log, bus, clock, settings, producer)
        await run_services(specs, bus, log, host=settings.host, port=settings.port, on_ready=on_ready, stop=stop)
    finally:
        await producer.close()
        await bus.close()
        log.close()
