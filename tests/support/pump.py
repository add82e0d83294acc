"""A synchronous bus pump: the production ServiceSpecs run on the simulated clock, no sleeping.

What run_services does with a spec, done by hand and in a fixed order: recover, join the
subscriptions' consumer groups (ConsumerLoop.step), relay the outbox (OutboxRelay.publish_pending),
start. `settle()` steps every relay and every consumer until a whole round reads nothing; `advance_to()`
moves the clock from one due timer (the services' own `run_timers` owners: matcher, checker, launcher)
to the next, settling at each. Deterministic, and a scenario takes milliseconds."""
from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from sluice.bus.inprocess import InProcessBus
from sluice.bus.topics import ALL_TOPICS
from sluice.clock import SimulatedClock
from sluice.eventlog.port import EventLog
from sluice.runtime.consumer import ConsumerLoop, Subscription
from sluice.runtime.outbox import OutboxRelay
from sluice.runtime.service import ServiceSpec

UNSERVED_PORT = 9
"""The gRPC port the specs are told (no gRPC server runs here; programs are fakes that call nothing)."""
MAX_ROUNDS = 10_000
YIELDS_PER_ROUND = 8
"""Event-loop turns given to the services' own tasks (the launcher's launches) in each round."""


class BusPump:
    def __init__(self, bus: InProcessBus, log: EventLog, clock: SimulatedClock, specs: list[ServiceSpec],
                 observers: list[Subscription] = ()) -> None:
        """`observers`: subscriptions of the test (what it watches on the bus), pumped like the services'."""
        self.bus = bus
        self.log = log
        self.clock = clock
        self.specs = specs
        self._observers = list(observers)
        self._loops: list[ConsumerLoop] = []
        self._waits: list[_Waits] = []
        self._relays: list[OutboxRelay] = []
        self._timers: list[Any] = []
        self._leases: list[Any] = []
        """Owners of a `keep_lease` task (the launcher): their lease is renewed on the simulated clock as it moves."""

    async def start(self) -> None:
        await self.bus.create_topics(ALL_TOPICS)
        producer = self.bus.producer()
        for spec in self.specs:
            if spec.recover:
                spec.recover()
        for spec in self.specs:
            for subscription in spec.subscriptions:
                self._join(subscription, producer)
            if spec.route:
                self._relays.append(OutboxRelay(spec.name, self.log, producer, spec.route,
                                                prefixes=spec.route_prefixes, monotonic=self._seconds))
            self._timers += [owner for task in spec.background
                             if getattr(task, "__name__", "") == "run_timers"
                             and (owner := getattr(task, "__self__", None)) is not None]
            self._leases += [owner for task in spec.background
                             if getattr(task, "__name__", "") == "keep_lease"
                             and (owner := getattr(task, "__self__", None)) is not None]
        for subscription in self._observers:
            self._join(subscription, producer)
        for spec in self.specs:
            if spec.on_listening:
                spec.on_listening(UNSERVED_PORT)
        for spec in self.specs:
            if spec.start:
                spec.start()
        await self.settle()

    def _join(self, subscription: Subscription, producer) -> None:
        consumer = self.bus.consumer(subscription.group, list(subscription.handlers))
        waits = _Waits(subscription.group)
        self._waits.append(waits)
        self._loops.append(ConsumerLoop(consumer, subscription, producer, sleep=waits))

    def _seconds(self) -> float:
        return self.clock.now().timestamp()

    async def settle(self) -> None:
        """Relay and consume until a whole round reads nothing from the log or the bus."""
        for _ in range(MAX_ROUNDS):
            for _ in range(YIELDS_PER_ROUND):
                await asyncio.sleep(0)
            progress = 0
            for relay in self._relays:
                progress += await relay.publish_pending()
            for waits in self._waits:
                waits.count = 0
            for loop in self._loops:
                progress += await loop.step(0)
            if not progress:
                return
        raise RuntimeError(f"the bus is not quiet at {self.clock.now()} after {MAX_ROUNDS} rounds")

    def next_wake_at(self) -> datetime | None:
        return min((t for owner in self._timers if (t := owner.next_wake_at()) is not None), default=None)

    async def fire_due(self) -> None:
        """Each service's timers that are due, each followed by what they cause; leases renewed first."""
        for owner in self._leases:
            await owner.lease_tick()
        for owner in self._timers:
            owner.fire_due()
            await self.settle()

    async def advance_to(self, target: datetime) -> None:
        """Move the clock to `target`, stopping at every timer due on the way, in time order."""
        for _ in range(MAX_ROUNDS):
            if (due := self.next_wake_at()) is None or due > target:
                break
            self.clock.set(max(due, self.clock.now()))
            await self.fire_due()
        else:
            raise RuntimeError(f"timers keep falling due at {self.clock.now()}")
        self.clock.set(max(target, self.clock.now()))
        await self.fire_due()


class PumpStalled(BaseException):
    """A consumer kept pausing on an infrastructure error (sluice.runtime.consumer.Pauses): in real time it
    would wait for ever here, since nothing moves the simulated clock while it waits. A BaseException, so
    the test fails at once, naming it, instead of hanging."""


class _Waits:
    """A pumped consumer's backoff: its first MAX_WAITS waits in a round return at once (a transient
    failure, or a bug's few tries, is tried again), the next raises PumpStalled."""

    MAX_WAITS = 200

    def __init__(self, group: str) -> None:
        self._group = group
        self.count = 0

    async def __call__(self, delay: float) -> None:
        self.count += 1
        if self.count > self.MAX_WAITS:
            raise PumpStalled(f"consumer group {self._group} paused {self.MAX_WAITS} times in one round on an infrastructure "
                              "error (see the warnings logged): it would wait for ever on the simulated clock")
        await asyncio.sleep(0)
