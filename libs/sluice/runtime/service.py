"""Runs one or more services on a bus and an event log: recovery, gRPC, consumers, outbox."""
from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Awaitable, Callable

from sluice.bus.port import Bus
from sluice.bus.topics import ALL_TOPICS
from sluice.eventlog.port import EventLog
from sluice.runtime.consumer import Subscription, consume
from sluice.runtime.grpc_server import GrpcBinding, start_server
from sluice.runtime.outbox import OutboxRelay, Route

log = logging.getLogger(__name__)


@dataclass
class ServiceSpec:
    name: str
    subscriptions: list[Subscription] = field(default_factory=list)
    route: Route | None = None
    grpc: list[GrpcBinding] = field(default_factory=list)
    recover: Callable[[], None] | None = None
    """Rebuild in-memory state from the log before consuming anything."""
    start: Callable[[], None] | None = None
    """Resume work recorded but not finished (called in the event loop, after recover)."""
    background: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    """Tasks that run as long as the service does."""


async def run_services(
    specs: list[ServiceSpec],
    bus: Bus,
    event_log: EventLog,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    on_ready: Callable[[int], None] = lambda port: None,
    stop: asyncio.Event | None = None,
) -> None:
    await bus.create_topics(ALL_TOPICS)
    for spec in specs:
        if spec.recover:
            spec.recover()
    server, bound = await start_server([b for spec in specs for b in spec.grpc], host, port)
    producer = bus.producer()
    jobs: list[Awaitable[None]] = []
    for spec in specs:
        jobs += [consume(bus, subscription, producer) for subscription in spec.subscriptions]
        if spec.route:
            jobs.append(OutboxRelay(spec.name, event_log, producer, spec.route).run())
        jobs += [start() for start in spec.background]
    tasks = [asyncio.create_task(job) for job in jobs]
    for spec in specs:
        if spec.start:
            spec.start()
    stop = stop or asyncio.Event()
    stopper = asyncio.create_task(stop.wait())
    on_ready(bound)
    try:
        done, _ = await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is not stopper and task.exception():
                raise task.exception()
    finally:
        for task in [*tasks, stopper]:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await server.stop(grace=1.0)
        await producer.close()
