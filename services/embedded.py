"""Runs services in this process on the configured event log and bus (by default the SQLite log and
the durable in-process bus under data_dir: embedded mode)."""
from __future__ import annotations

import asyncio
from typing import Callable

from sluice.clock import Clock, SystemClock
from sluice.runtime.metrics import Registry
from sluice.runtime.metrics_eventlog import TimedEventLog
from sluice.runtime.service import run_services
from sluice_services.adapters import open_bus, open_event_log
from sluice_services.composition import SERVICES, Settings, build


async def run_embedded(
    settings: Settings,
    names: tuple[str, ...] = SERVICES,
    *,
    clock: Clock | None = None,
    on_ready: Callable[[int], None] = lambda port: None,
    stop: asyncio.Event | None = None,
    metrics: Registry | None = None,
    on_metrics_ready: Callable[[int], None] = lambda port: None,
) -> None:
    """`metrics`: the registry every part of these services reports to (a new one when None), served
    on settings.metrics_port when that is set."""
    clock = clock or SystemClock()
    metrics = metrics or Registry()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    log = TimedEventLog(open_event_log(settings.event_log, settings.data_dir, clock, migrate=settings.migrate), metrics)
    bus = open_bus(settings.bus, settings.data_dir, clock)
    producer = bus.producer()
    try:
        specs = build(names, log, bus, clock, settings, producer)
        await run_services(specs, bus, log, host=settings.host, port=settings.port, on_ready=on_ready, stop=stop,
                           metrics=metrics, metrics_port=settings.metrics_port, on_metrics_ready=on_metrics_ready,
                           security=settings.grpc_security)
    finally:
        await producer.close()
        await bus.close()
        log.close()
