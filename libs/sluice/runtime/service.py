"""Runs one or more services on a bus and an event log: recovery, gRPC, consumers, outbox, metrics."""
from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Awaitable, Callable

from sluice.bus.port import Bus, Producer
from sluice.bus.topics import ALL_TOPICS
from sluice.eventlog.port import EventLog
from sluice.runtime.access import Authenticator
from sluice.runtime.http_auth import server_ssl_context
from sluice.runtime.permissions import Resolver
from sluice.runtime.consumer import Subscription, consume
from sluice.runtime.grpc_metrics import MetricsInterceptor
from sluice.runtime.grpc_security import GrpcSecurity
from sluice.runtime.grpc_server import GrpcBinding, start_server
from sluice.runtime.health import Health, event_log_check, watch_dependency
from sluice.runtime.heap import REFREEZE_SECONDS, freeze_long_lived, keep_frozen, space_young_collections
from sluice.runtime.journal import Journal
from sluice.runtime.map_snapshots import snapshots_written
from sluice.runtime.metrics import Registry
from sluice.runtime.metrics_scheduler import service_context
from sluice.runtime.metrics_http import start_metrics_server
from sluice.runtime.outbox import OutboxRelay, Route

log = logging.getLogger(__name__)


@dataclass
class ServiceSpec:
    name: str
    subscriptions: list[Subscription] = field(default_factory=list)
    route: Route | None = None
    route_prefixes: tuple[str, ...] = ()
    """The stream prefixes of every event `route` publishes from: its relay reads only those (empty: all)."""
    grpc: list[GrpcBinding] = field(default_factory=list)
    recover: Callable[[], None] | None = None
    """Rebuild in-memory state from the log before consuming anything."""
    start: Callable[[], None] | None = None
    """Resume work recorded but not finished (called in the event loop, after recover)."""
    background: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    """Tasks that run as long as the service does."""
    on_listening: Callable[[int], None] | None = None
    """Told the gRPC server's bound port once it listens, before `start` and any consumer (the
    launcher tells its programs where its API is)."""
    authenticators: list[Authenticator] = field(default_factory=list)
    """Credentials this service issues (per-run program tokens): the server's gRPC interceptor and
    HTTP middleware ask them, after the policy file's and the server token's, who a caller is."""
    resolvers: dict[str, Resolver] = field(default_factory=dict)
    """How this service finds the namespace of a request addressed by id (a schedule's, a run's...),
    by the names in sluice.runtime.permissions.RESOLVERS, for the authorization interceptor."""
    instrument: Callable[[Registry], list[Awaitable[None]]] | None = None
    """Given this service's metrics registry: registers what reports its state (collectors read at
    scrape time) and returns the tasks that keep its other metrics (sluice.runtime.metrics_scheduler)."""


async def run_services(
    specs: list[ServiceSpec],
    bus: Bus,
    event_log: EventLog,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    on_ready: Callable[[int], None] = lambda port: None,
    stop: asyncio.Event | None = None,
    metrics: Registry | None = None,
    metrics_port: int | None = None,
    on_metrics_ready: Callable[[int], None] = lambda port: None,
    refreeze_seconds: float = REFREEZE_SECONDS,
    security: GrpcSecurity = GrpcSecurity(),
    health: Health | None = None,
) -> None:
    """Run `specs` until `stop` is set or a task fails. The gRPC server reports to `metrics` (a private
    registry when None), each service's consumers, outbox relay, timers and `instrument` to its own
    registry in it (`metrics.service(name)`); with a `metrics_port` (0: a free one) the
    registry is served over HTTP on `host` too, and `on_metrics_ready` gets the port before `on_ready`.
    Young collections are spaced out (`space_young_collections`); the heap recovered is frozen out
    of garbage collection, and again every `refreeze_seconds`,
    with what survived the young generations frozen every second in between (0: only after
    recovery); see sluice.runtime.heap. `security`: the API's token, policy and TLS, for gRPC and
    the metrics endpoint alike; the specs' authenticators and resolvers serve its authorization.
    `health` (a new one when None): not ready until recovered and started, nor while the event log's
    probe fails; gRPC health and /readyz say so, /healthz says whether the loop ticks."""
    registry = metrics or Registry()
    health = health or Health()
    authenticators = [a for spec in specs for a in spec.authenticators]
    async with contextlib.AsyncExitStack() as stack:
        if metrics_port is not None:  # first: /healthz and /readyz answer (503 "recovering") between recoveries
            runner, metrics_bound = await start_metrics_server(registry, host, metrics_port,
                                                               security.authorizer(authenticators),
                                                               server_ssl_context(security), health)
            stack.push_async_callback(runner.cleanup)
            on_metrics_ready(metrics_bound)
        await bus.create_topics(ALL_TOPICS)
        space_young_collections()
        for spec in specs:
            if spec.recover:
                spec.recover()
                await asyncio.sleep(0)
        freeze_long_lived()
        stack.push_async_callback(snapshots_written)
        producer = bus.producer()
        stack.push_async_callback(producer.close)
        bindings = [b for spec in specs for b in spec.grpc]
        resolvers = {name: resolve for spec in specs for name, resolve in spec.resolvers.items()}
        server, bound = await start_server(bindings, host, port, [MetricsInterceptor(registry)], security,
                                           authenticators, resolvers, health)
        stack.push_async_callback(server.stop, 1.0)
        for spec in specs:
            if spec.on_listening:
                spec.on_listening(bound)
        tasks = [asyncio.create_task(job, context=service_context(service))
                 for job, service in _jobs(specs, bus, event_log, producer, registry, health)]
        tasks += [asyncio.create_task(health.beat()),
                  asyncio.create_task(watch_dependency(health, "event log", event_log_check(event_log)))]
        if refreeze_seconds > 0:
            tasks.append(asyncio.create_task(keep_frozen(refreeze_seconds)))
        for spec in specs:
            if spec.start:
                spec.start()
        await health.recovered()
        on_ready(bound)
        await _run_until_stopped(tasks, stop or asyncio.Event())


def _jobs(specs: list[ServiceSpec], bus: Bus, event_log: EventLog, producer: Producer,
          registry: Registry, health: Health) -> list[tuple[Awaitable[None], Registry]]:
    """Each task with its service's registry. Consumers and outbox relays wait out infrastructure
    failures with `health` not ready meanwhile."""
    jobs: list[tuple[Awaitable[None], Registry]] = []
    for spec in specs:
        metrics = registry.service(spec.name)
        mine: list[Awaitable[None]] = [consume(bus, subscription, producer, metrics=metrics, health=health)
                                       for subscription in spec.subscriptions]
        if spec.route:
            mine.append(OutboxRelay(spec.name, event_log, producer, spec.route, metrics=metrics,
                                    prefixes=spec.route_prefixes, health=health).run())
        mine += [start() for start in spec.background]
        if spec.route_prefixes and Journal.enabled():
            mine.append(Journal(event_log, spec.route_prefixes, spec.name).follow())
        if spec.instrument is not None:
            mine += spec.instrument(metrics)
        jobs += [(job, metrics) for job in mine]
    return jobs


async def _run_until_stopped(tasks: list[asyncio.Task], stop: asyncio.Event) -> None:
    """Wait for `stop` or the first task to end (re-raising its error); cancel everything left."""
    stopper = asyncio.create_task(stop.wait())
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
