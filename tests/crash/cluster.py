"""A deterministic driver over the real services, outbox relays and bus consumers.

Each service is a `Node` built by services/composition.py's own spec (same objects, subscriptions,
groups and routes; the launcher by hand, with programs of a simulated world instead of spark-submit,
reaching the datasets node through its RunData port: tests/crash/run_data.py), but over
fault-injecting ports and without free-running tasks: the driver steps the nodes' consumer loops,
relays and timers one at a time in an order drawn from a seed, until a whole round changes nothing;
then it moves the SimulatedClock to the next due timer, program end or input. When a step crashes (a
`Crash` at an armed point), the node's objects are dropped (its group members leave, its launch
tasks are cancelled) and a new node is built and recovered from the log, which survives, as does the
bus."""
from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Awaitable, Callable

from sluice.bus.inprocess import InProcessBus
from sluice.bus.topics import ALL_TOPICS, LAUNCH_REQUESTS, PARTITION_NOTIFICATIONS
from sluice.clock import SimulatedClock
from sluice.domain import apps
from sluice.domain.apps import DeployApp
from sluice.domain.common import Notification
from sluice.eventlog.port import EventLog
from sluice.runtime.consumer import ConsumerLoop, Subscription
from sluice.runtime.outbox import OutboxRelay
from sluice.runtime.service import ServiceSpec
from tests.support.faults import Crash, CrashPoint, FaultPlan, FaultyConsumer, FaultyEventLog, FaultyProducer, \
    FaultySubmitter
from sluice.wire.common import notification_to_proto
from sluice_services import catalogue, composition
from sluice_services.launcher.program_api import ProgramApi
from sluice_services.launcher.service import LauncherService
from tests.crash.programs import EveryProgramDeployed, ProgramWorld
from tests.crash.run_data import CrashingRunData

NOT_CRASHED = ("lineage", "alerts")
"""Lineage and alerts only record (and notify) what the other services did; the oracle judges none of it."""
SERVICES = tuple(name for name in catalogue.NAMES if name not in NOT_CRASHED)
MAX_STEPS_PER_INSTANT = 20_000
LAUNCH_SLOTS = 10_000
"""The launcher's own limit, high: the checker's constraints decide concurrency, and which waiting
launch takes a freed launcher slot first would otherwise depend on the order of recovery."""

Step = Callable[[], Awaitable[int]]


@dataclass
class Node:
    """One service process: the objects a crash discards."""

    name: str
    steps: list[tuple[str, Step]] = field(default_factory=list)
    members: list[FaultyConsumer] = field(default_factory=list)
    service: object = None
    next_wake_at: Callable[[], datetime | None] = lambda: None


class Cluster:
    def __init__(self, log: EventLog, bus: InProcessBus, clock: SimulatedClock, world: ProgramWorld,
                 plan: FaultPlan, order_seed: int, work_dir: Path, supervised_programs: bool = True,
                 one_member: bool = True) -> None:
        self.log = log
        self.bus = bus
        self.clock = clock
        self.world = world
        self.plan = plan
        self._rng = random.Random(order_seed)
        self._settings = composition.Settings(data_dir=work_dir)
        self._supervised = supervised_programs
        self._one_member = one_member
        self._sent_jobs = composition.sent_jobs_for(("matcher", "checker")) if one_member else None
        """As `build` wires embedded mode; shared across a node's restarts (a job taken for equal bytes is the parse)."""
        self.nodes: dict[str, Node] = {}
        self.restarts: list[tuple[str, CrashPoint]] = []
        self._outside = None

    async def start(self) -> None:
        await self.bus.create_topics(ALL_TOPICS)
        self._outside = self.bus.producer()  # the world's producers of notifications; they do not crash
        for name in SERVICES:
            await self._boot(name)

    # -- what users and the world do ---------------------------------------------------------

    async def deploy(self, command: DeployApp) -> None:
        """A client deploying; after a crash it looks whether the deployment committed before retrying."""
        stream = apps.stream_name(command.namespace, command.app)
        before = self.log.stream_version(stream)
        while True:
            try:
                self.nodes["registry"].service.deploy(command)
                return
            except Crash as crash:
                await self._crashed(crash.point)
                if self.log.stream_version(stream) != before:
                    return

    async def notify(self, notification: Notification, topic: str = PARTITION_NOTIFICATIONS) -> None:
        await self._outside.send(topic, notification_to_proto(notification).SerializeToString(),
                                 key=notification.event_key().encode())

    # -- the clock ---------------------------------------------------------------------------

    def next_wake_at(self) -> datetime | None:
        times = [node.next_wake_at() for node in self.nodes.values()] + [self.world.next_end_at()]
        return min((t for t in times if t is not None), default=None)

    async def settle(self) -> None:
        """Step everything in a seeded order until a whole round changes nothing: no step read or
        wrote anything, no boundary was crossed, no program ended."""
        progress, steps = 1, 0
        while progress:
            progress = self.world.end_due()
            order = [(node.name, label, step) for node in self.nodes.values() for label, step in node.steps]
            self._rng.shuffle(order)
            for name, label, step in order:
                if self.nodes.get(name) is None or (label, step) not in self.nodes[name].steps:
                    continue  # the node was rebuilt by a crash in this round
                progress += await self._step(name, step)
                steps += 1
            if steps > MAX_STEPS_PER_INSTANT:
                raise RuntimeError(f"no quiescence at {self.clock.now()} after {steps} steps")

    async def _step(self, name: str, step: Step) -> int:
        fired, crossed = len(self.plan.fired), self.plan.total
        try:
            progress = await step() + self.plan.total - crossed
        except Crash:
            progress = 1
        for point in self.plan.fired[fired:]:  # raised here, or inside a launch task
            await self._crashed(point)
            progress = 1
        return progress

    async def _crashed(self, point: CrashPoint) -> None:
        name = service_of(point)
        self.restarts.append((name, point))
        await self._discard(name)
        await self._boot(name)

    # -- nodes -------------------------------------------------------------------------------

    async def _discard(self, name: str) -> None:
        node = self.nodes.pop(name, None)
        if node is not None:
            await self._stop(node)

    @staticmethod
    async def _stop(node: Node) -> None:
        for member in node.members:
            await member.close()  # the group forgets the member: uncommitted records are delivered again
        if isinstance(node.service, LauncherService):
            tasks = list(node.service._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _boot(self, name: str) -> None:
        """Build the node and recover it from the log; a crash while recovering boots it again. A
        crash of another service meanwhile (the datasets service, called by a launch resumed at
        start) restarts that one once this one is up."""
        others: list[CrashPoint] = []
        while True:
            fired = len(self.plan.fired)
            node = Node(name)
            try:
                await getattr(self, f"_build_{name}")(node, FaultyEventLog(self.log, self.plan, name),
                                                      FaultyProducer(self.bus.producer(), self.plan, name))
            except Crash:
                pass
            own = [point for point in self.plan.fired[fired:] if service_of(point) == name]
            others += [point for point in self.plan.fired[fired:] if service_of(point) != name]
            if not own:
                self.nodes[name] = node
                break
            self.restarts.append((name, own[0]))  # e.g. a launch resumed at start crashed
            await self._stop(node)
        for point in others:
            await self._crashed(point)

    def _member(self, node: Node, subscription: Subscription, producer: FaultyProducer) -> None:
        consumer = FaultyConsumer(self.bus.consumer(subscription.group, list(subscription.handlers)), self.plan,
                                  node.name, subscription.group)
        node.members.append(consumer)
        loop = ConsumerLoop(consumer, subscription, producer)
        node.steps.append((f"consume:{subscription.group}", lambda: loop.step(0)))

    def _relay(self, node: Node, log: EventLog, producer: FaultyProducer, route) -> None:
        relay = OutboxRelay(node.name, log, producer, route, monotonic=lambda: self.clock.now().timestamp())
        caught_up_at = None

        async def publish() -> int:
            """Reads the log only if something was appended since it last found nothing new: every
            append goes through a service's FaultyEventLog, so the crossings say when."""
            nonlocal caught_up_at
            appends = self.plan.appends
            if appends == caught_up_at:
                return 0
            read = await relay.publish_pending()
            if not read:
                caught_up_at = appends
            return read
        node.steps.append(("outbox", publish))

    async def _from_spec(self, node: Node, spec: ServiceSpec, log: EventLog, producer: FaultyProducer) -> None:
        """What run_services does with a spec, as steps: recover, join the groups, relay, start."""
        if spec.recover:
            spec.recover()
        node.service = getattr(spec.route, "__self__", None)  # the service object behind the spec's route
        for subscription in spec.subscriptions:
            self._member(node, subscription, producer)
        if spec.route:
            self._relay(node, log, producer, spec.route)
        if spec.start:
            spec.start()
        self._timers(node)

    def _timers(self, node: Node) -> None:
        """Timers the service would fire from its background loop are fired by the driver instead."""
        service = node.service
        if not hasattr(service, "fire_due"):
            return
        node.next_wake_at = service.next_wake_at

        async def fire() -> int:
            return int(service.fire_due() or 0)
        node.steps.append(("timers", fire))

    async def _build_registry(self, node: Node, log: EventLog, producer: FaultyProducer) -> None:
        await self._from_spec(node, composition.registry_spec(log, self.clock, producer), log, producer)

    async def _build_matcher(self, node: Node, log: EventLog, producer: FaultyProducer) -> None:
        await self._from_spec(node, composition.matcher_spec(log, self.clock, producer, one_member=self._one_member,
                                                             sent_jobs=self._sent_jobs), log, producer)

    async def _build_checker(self, node: Node, log: EventLog, producer: FaultyProducer) -> None:
        await self._from_spec(node, composition.checker_spec(log, self.clock, sent_jobs=self._sent_jobs), log, producer)

    async def _build_datasets(self, node: Node, log: EventLog, producer: FaultyProducer) -> None:
        await self._from_spec(node, composition.datasets_spec(log, self.clock, self._settings), log, producer)

    async def _build_launcher(self, node: Node, log: EventLog, producer: FaultyProducer) -> None:
        run_data = CrashingRunData(lambda: self.nodes.get("datasets"), self._settings.partitions_dir)
        launcher = LauncherService(log, self.clock, EveryProgramDeployed(),
                                   FaultySubmitter(self.world.submitter(self._supervised), self.plan),
                                   self._settings.partitions_dir, LAUNCH_SLOTS, run_data,
                                   program_api=ProgramApi(run_data))
        launcher.recover()
        node.service = launcher
        self._member(node, Subscription("launcher", {LAUNCH_REQUESTS: launcher.on_launch_requested}), producer)
        self._relay(node, log, producer, launcher.route)
        self._timers(node)
        launcher.resume()
        await self._let_launches_run()

        async def launches() -> int:
            await self._let_launches_run()
            return 0  # what the launch tasks did crossed boundaries (submits, appends), which counts
        node.steps.append(("launches", launches))

    @staticmethod
    async def _let_launches_run() -> None:
        for _ in range(8):  # a launch task's path to its program's wait is a few awaits long
            await asyncio.sleep(0)

    async def close(self) -> None:
        for name in list(self.nodes):
            await self._discard(name)


def service_of(point: CrashPoint) -> str:
    return point.boundary.split(".", 1)[0]

