"""One run of the workload on a backend, with or without crash points, and the oracle's verdict.

The oracle is the same workload run without crashes. A crashed run must end like it: every
notification delivered to each schedule's program as often (none lost, none twice, whichever run
took it), every time-fired start made as often, with the same trigger context, no run or job
left unfinished that the oracle finished, and equal final states (jobs read model, matcher states,
checker queue, launcher runs), each rebuilt from the log by a fresh service's own recovery."""
from __future__ import annotations

import asyncio
import logging
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from sluice.bus.inprocess import InProcessBus
from sluice.clock import SimulatedClock
from sluice.domain.common import RunStatus
from sluice.eventlog.port import EventLog
from sluice.readmodels.jobs import JobsView
from tests.support.faults import Crash, CrashPoint, FaultPlan
from sluice_services.checker.service import CheckerService
from sluice_services.launcher.service import LauncherService
from sluice_services.matcher.service import MatcherService
from tests.crash.cluster import Cluster
from tests.crash.programs import EveryProgramDeployed, ProgramWorld
from tests.crash.workload import T0, Workload

LogFactory = Callable[[SimulatedClock, Path], EventLog]


@dataclass
class Outcome:
    launches: Counter
    runs: dict[str, tuple]
    matcher: dict
    checker: object
    jobs: dict[str, object]
    crossings: Counter
    fired: list[CrashPoint] = field(default_factory=list)


@dataclass
class Verdict:
    lost: int = 0
    duplicate: int = 0
    spurious: int = 0
    stuck: int = 0
    mismatches: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicate or self.spurious or self.stuck or self.mismatches)


async def run(workload: Workload, make_log: LogFactory, work_dir: Path, points: tuple[CrashPoint, ...] = (),
              order_seed: int = 0, supervised_programs: bool = True, one_member: bool = True) -> Outcome:
    """`one_member`: the matcher as embedded mode composes it (composition.matcher_spec), else its two stages."""
    work_dir.mkdir(parents=True, exist_ok=True)
    clock = SimulatedClock(T0)
    log = make_log(clock, work_dir)
    bus = InProcessBus(None, clock=clock)
    world = ProgramWorld(clock)
    plan = FaultPlan(points)
    cluster = Cluster(log, bus, clock, world, plan, order_seed, work_dir, supervised_programs, one_member)
    try:
        with _quiet_crashed_tasks():
            await cluster.start()
            await _drive(cluster, workload, clock)
            await cluster.close()
        return _outcome(log, clock, world, plan, work_dir)
    finally:
        await bus.close()
        log.close()


async def _drive(cluster: Cluster, workload: Workload, clock: SimulatedClock) -> None:
    inputs = sorted([(at, 0, i, d) for i, (at, d) in enumerate(workload.deployments)]
                    + [(n.time, 1, i, n) for i, n in enumerate(workload.notifications)], key=lambda x: x[:3])
    next_input = 0
    while True:
        while next_input < len(inputs) and inputs[next_input][0] <= clock.now():
            _, kind, _, item = inputs[next_input]
            await (cluster.deploy(item) if kind == 0 else cluster.notify(item))
            next_input += 1
        await cluster.settle()
        due = [t for t in (cluster.next_wake_at(), inputs[next_input][0] if next_input < len(inputs) else None)
               if t is not None]
        if not due or min(due) > workload.ends_at:
            break
        clock.set(max(min(due), clock.now()))
    clock.set(max(workload.ends_at, clock.now()))
    await cluster.settle()


def _outcome(log: EventLog, clock: SimulatedClock, world: ProgramWorld, plan: FaultPlan, work_dir: Path) -> Outcome:
    """Final states as fresh services recover them from the log."""
    launcher = LauncherService(log, clock, EveryProgramDeployed(), world.submitter(), work_dir / "data")
    launcher.recover()
    matcher = MatcherService(log, clock)
    matcher.recover()
    checker = CheckerService(log, clock)
    checker.recover()
    jobs = JobsView()
    position = 0
    while events := log.read_all(position, 5000):
        for event in events:
            jobs.apply(event)
        position = events[-1].position
    runs = {r.id: (r.job.id, r.status.value, r.requested_at, r.started_at, r.ended_at) for r in launcher.runs()}
    return Outcome(Counter(launch.identity for launch in world.launches), runs, matcher.states(), checker.state,
                   {j.id: j for j in jobs.list()}, Counter(plan.crossings), list(plan.fired))


def deliveries(launches: Counter) -> Counter:
    """What the program starts delivered: each notification to its schedule's program (in whichever
    run took it: a later fire's notifications join a waiting job and arrive with its run), and each
    start without notifications (a time trigger's) by its identity."""
    delivered: Counter = Counter()
    for identity, count in launches.items():
        _, schedule_id, _, _, notifications = identity
        for key in [(schedule_id, n) for n in notifications] or [identity]:
            delivered[key] += count
    return delivered


def judge(oracle: Outcome, outcome: Outcome) -> Verdict:
    verdict = Verdict()
    expected, delivered = deliveries(oracle.launches), deliveries(outcome.launches)
    for key, count in expected.items():
        verdict.lost += max(0, count - delivered.get(key, 0))
    for key, count in delivered.items():
        extra = max(0, count - expected.get(key, 0))
        if key in expected:
            verdict.duplicate += extra
        else:
            verdict.spurious += extra
    unfinished = (RunStatus.STARTING.value, RunStatus.RUNNING.value)
    for run_id, expected in oracle.runs.items():
        got = outcome.runs.get(run_id)
        if got is not None and got[1] in unfinished and expected[1] not in unfinished:
            verdict.stuck += 1
    oracle_queue = set(getattr(oracle.checker, "queue", {}))
    verdict.stuck += sum(1 for job_id in getattr(outcome.checker, "queue", {}) if job_id not in oracle_queue)
    for name in ("runs", "matcher", "jobs"):
        verdict.mismatches += _differences(name, getattr(oracle, name), getattr(outcome, name))
    if oracle.checker != outcome.checker:
        verdict.mismatches.append("checker: the queue aggregate differs")
    return verdict


def _differences(name: str, expected: dict, got: dict) -> list[str]:
    found = []
    for key in sorted(set(expected) | set(got)):
        if expected.get(key) != got.get(key):
            found.append(f"{name}[{key}]: oracle {_short(expected.get(key))} != run {_short(got.get(key))}")
    return found


def _short(value: object, limit: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


@contextmanager
def _quiet_crashed_tasks() -> Iterator[None]:
    """A launch task killed by a Crash is a simulated death, not an unretrieved error to log."""
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()

    loop.set_exception_handler(lambda loop, context: None if isinstance(context.get("exception"), Crash)
                               else loop.default_exception_handler(context))
    launcher_log = logging.getLogger("sluice_services.launcher.service")
    level = launcher_log.level
    launcher_log.setLevel(logging.CRITICAL)  # "run failed to launch" for every crash inside a launch
    try:
        yield
    finally:
        loop.set_exception_handler(previous)
        launcher_log.setLevel(level)
