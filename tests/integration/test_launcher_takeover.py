"""Two launchers on separate data dirs ("hosts") sharing one event log (one SQLite file, a connection
each), on a simulated clock, with programs that are real processes (started through the real submit
path and the supervise wrapper) writing a ledger of their starts and ends.

A seeded sequence of 20 takeovers: the lease holder is killed (the host dies: the launcher and every
program on it, kill -9) or paused (launcher and programs frozen, SIGSTOP), the clock passes the lease's
expiry, the other launcher takes the lease over; launch requests flow throughout, to both (the one
without the lease refuses them, appending nothing, and they are delivered again). The oracle: the
ledger and the log. No attempt ever starts twice, no run completes twice, no run transition was
appended by a launcher whose lease had been taken over, every launch request ends COMPLETED (a run
whose launcher's host died was LOST and retried by its policy).

The seed is printed; SLUICE_TAKEOVER_SEED=<seed> repeats a sequence."""
from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sys
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from sluice.bus.port import Record
from sluice.bus.topics import LAUNCH_REQUESTS
from sluice.clock import SimulatedClock
from sluice.domain import lease as lease_domain
from sluice.domain.common import ProgramRef, RunStatus
from sluice.domain.jobs import Job, RetryPolicy, TriggerContext
from sluice.domain.lease import LEASE_STREAM
from sluice.eventlog.codec import EventTypes
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.ids import derived_id, run_id_for
from sluice.v1 import jobs_pb2
from sluice.wire.jobs import job_to_proto
from sluice_services.launcher import supervise
from sluice_services.launcher.lease import EPOCH_METADATA, LeaseChange, LeaseKeeper, LeaseTerms
from sluice_services.launcher.programs import SparkConfig, SparkSubmitter
from sluice_services.launcher.service import LauncherService, NotLeaseHolder
from sluice_services.launcher.tracking import spawned
from tests.support.waiting import until

pytestmark = pytest.mark.integration

TAKEOVERS = 20
LEASE = LeaseTerms(seconds=30, renew_every=10)
POLICY = RetryPolicy(max_retries=25, delay_seconds=5, backoff=1)
PROGRAM = ProgramRef("web", "analytics", "ledger")
LEDGER_PROGRAM = '''
import json, os, sys, time
from pathlib import Path
argv = sys.argv
context_path = Path(argv[argv.index("--sluice-context") + 1])
context = json.loads(context_path.read_text())
properties, system = context["properties"], context["system"]
host = context_path.parts[-5] if context_path.parent.name.startswith("attempt-") else context_path.parts[-4]

def ledger(what):
    line = json.dumps({"what": what, "run_id": context["run_id"], "attempt": int(system.get("attempt", 1)),
                       "pid": os.getpid(), "host": host}) + "\\n"
    fd = os.open(properties["ledger"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)

ledger("start")
gate = Path(properties["gates"]) / context["run_id"]
while not gate.exists():
    time.sleep(0.01)
ledger("end")
Path(system["result_path"]).write_text(json.dumps({"outputs": [], "inputs": []}))
'''


class Catalog:
    def __init__(self, program: Path) -> None:
        self.program = program

    def entry_point(self, program: ProgramRef) -> Path:
        return self.program


class Host:
    """One launcher's machine: its data dir, and the launcher process running there now."""

    def __init__(self, name: str, world: "World") -> None:
        self.name = name
        self.world = world
        self.root = world.root / name
        self.home = f"{name}/boot-1/dir-1"
        self.launcher: LauncherService | None = None
        self.log: SqliteEventLog | None = None
        self.start()

    def start(self) -> LauncherService:
        """A new launcher process on this host (new owner id, same home)."""
        self.log = SqliteEventLog(self.world.root / "events.db", clock=self.world.clock)
        keeper = LeaseKeeper(self.log, self.world.clock, self.home, LEASE)
        self.launcher = LauncherService(self.log, self.world.clock, Catalog(self.world.program),
                                        SparkSubmitter(self.world.config, 0.05), self.root / "data", max_parallel=64,
                                        lease=keeper)
        self.launcher.recover()
        self.launcher.resume()
        return self.launcher

    @property
    def holds(self) -> bool:
        return self.launcher.holds_lease

    def wrappers(self) -> list[int]:
        """The process groups of the programs still going on this host (their wrappers lead them)."""
        found = []
        for path in (self.root / "runs").rglob(supervise.SPAWNED):
            wrapper = spawned(path.parent)
            if wrapper is not None and wrapper.alive():
                found.append(wrapper.pid)
        return found

    def signal_programs(self, signum: int) -> None:
        """Its programs' process groups: those whose wrapper claimed its attempt, and those the launcher
        recorded started whose wrapper has not yet."""
        recorded = [run.attempt.pid for run_id in self.launcher._following
                    if (run := self.launcher.get(run_id)) is not None and run.attempt.pid]
        for group in {*self.wrappers(), *recorded}:
            try:
                os.killpg(group, signum)
            except (ProcessLookupError, PermissionError):
                pass

    async def die(self) -> None:
        """The host dies: every program is killed, the launcher's tasks end where they are."""
        self.signal_programs(signal.SIGKILL)  # first: the launcher still knows which wrappers it started
        tasks = list(self.launcher._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.log.close()


class World:
    def __init__(self, root: Path, seed: int) -> None:
        self.root = root
        self.rng = random.Random(seed)
        self.clock = SimulatedClock(datetime(2026, 11, 23, 10, tzinfo=timezone.utc))
        self.ledger = root / "ledger.jsonl"
        self.gates = root / "gates"
        self.gates.mkdir()
        self.program = root / "ledger_program.py"
        self.program.write_text(LEDGER_PROGRAM)
        spark_submit = root / "spark-submit"
        spark_submit.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{self.program}" "$@"\n')
        spark_submit.chmod(0o755)
        self.config = SparkConfig(spark_submit=str(spark_submit))
        self.jobs: list[str] = []
        self.undelivered: list[Job] = []
        self.hosts = [Host("host-a", self), Host("host-b", self)]

    def owner(self) -> Host:
        (holder,) = [host for host in self.hosts if host.holds]
        return holder

    def new_job(self) -> Job:
        n = len(self.jobs) + len(self.undelivered) + 1
        job = Job(derived_id("job", str(n)), "schedule-1", n, PROGRAM,
                  TriggerContext("schedule-1", "hourly", {"ledger": str(self.ledger), "gates": str(self.gates)}),
                  self.clock.now(), retry_policy=POLICY)
        return job

    async def request(self, host: Host, job: Job) -> None:
        message = jobs_pb2.LaunchRequested(job=job_to_proto(job)).SerializeToString()
        await host.launcher.on_launch_requested(Record(LAUNCH_REQUESTS, 0, len(self.jobs), b"k", message, (), 0))
        self.jobs.append(run_id_for(job.id))

    def open_gates(self, share: float) -> None:
        for run_id in self.jobs:
            if self.rng.random() < share:
                (self.gates / run_id).touch()

    def ledger_lines(self) -> list[dict]:
        if not self.ledger.exists():
            return []
        return [json.loads(line) for line in self.ledger.read_text().splitlines() if line.strip()]

    def started_on(self, host: Host) -> set[str]:
        return {line["run_id"] for line in self.ledger_lines() if line["host"] == host.name}


def settled(host: Host, recorded: bool) -> bool:
    """Every run its launcher follows has started (recorded RUNNING): it only waits for programs now;
    `recorded`: and every program that ended was recorded ended (a launcher that has been running a while)."""
    launcher = host.launcher
    ended = {(line["run_id"], line["attempt"]) for line in host.world.ledger_lines() if line["what"] == "end"}
    for run_id in launcher._following:
        run = launcher.get(run_id)
        if run.status is not RunStatus.RUNNING:
            return False
        if recorded and ((run_id, run.attempt.number) in ended
                         or (launcher.attempt_dir(run) / supervise.EXIT_CODE).exists()):
            return False
    return True


@pytest.fixture
def seed() -> int:
    value = int(os.environ.get("SLUICE_TAKEOVER_SEED") or random.SystemRandom().randrange(1 << 32))
    print(f"takeover test seed: {value} (SLUICE_TAKEOVER_SEED={value} repeats it)")
    return value


@pytest.fixture
def world(tmp_path: Path, seed: int):
    w = World(tmp_path, seed)
    yield w
    for host in w.hosts:
        host.signal_programs(signal.SIGKILL)
        host.signal_programs(signal.SIGCONT)
        if host.log is not None:
            host.log.close()


async def test_two_launchers_over_20_seeded_takeovers_never_execute_a_run_twice(world: World):
    rng = world.rng
    assert [host.holds for host in world.hosts] == [True, False], "the first launcher up takes the lease"
    kinds = Counter()
    for round_ in range(TAKEOVERS):
        owner = world.owner()
        standby = next(host for host in world.hosts if host is not owner)
        for job in [*world.undelivered, *(world.new_job() for _ in range(rng.randint(1, 3)))]:
            await world.request(owner, job)
        world.undelivered.clear()
        if rng.random() < 0.5:  # a launch request delivered to the launcher without the lease
            job = world.new_job()
            with pytest.raises(NotLeaseHolder):
                await standby.launcher.on_launch_requested(Record(
                    LAUNCH_REQUESTS, 0, 0, b"k", jobs_pb2.LaunchRequested(job=job_to_proto(job)).SerializeToString(),
                    (), 0))
            world.undelivered.append(job)
        for _ in range(rng.randint(0, 2)):  # time passes; the owner renews, retries come due
            world.open_gates(rng.uniform(0, 0.4))
            world.clock.advance(timedelta(seconds=LEASE.renew_seconds))
            assert await owner.launcher.lease_tick() is None, "renewed"
            assert await standby.launcher.lease_tick() is None, "the standby waits: the lease is live"
            owner.launcher.fire_due()
            await asyncio.sleep(rng.uniform(0, 0.15))
        recorded = rng.random() < 0.8  # else the failure may come between a program's end and its record
        await until(lambda: settled(owner, recorded), "the owner's programs to have started", timeout=30)

        kind = rng.choice(("kill", "pause"))
        kinds[kind] += 1
        if kind == "kill":
            await owner.die()
        else:
            owner.signal_programs(signal.SIGSTOP)  # the launcher is not driven either: frozen
        world.clock.advance(timedelta(seconds=LEASE.seconds + 1))
        assert await standby.launcher.lease_tick() is LeaseChange.ACQUIRED, f"round {round_}: taken over"
        if kind == "kill":
            owner.start()  # the host comes back: a new launcher on its data dir, standing by
            assert not owner.holds
        else:
            # The frozen launcher wakes: its renewal meets the newer epoch; it steps down and kills its programs.
            assert await owner.launcher.lease_tick() is LeaseChange.LOST
            owner.signal_programs(signal.SIGCONT)
        world.clock.advance(timedelta(seconds=POLICY.delay_seconds))
        standby.launcher.fire_due()  # retries of what the previous owner's host had going
    print(f"takeovers: {dict(kinds)}")

    owner = world.owner()
    for job in world.undelivered:
        await world.request(owner, job)
    for run_id in world.jobs:
        (world.gates / run_id).touch()

    def all_ended() -> bool:
        owner.launcher.fire_due()
        return all((run := owner.launcher.get(run_id)) is not None and run.status.terminal for run_id in world.jobs)

    for _ in range(400):
        if all_ended():
            break
        world.clock.advance(timedelta(seconds=POLICY.delay_seconds))
        await owner.launcher.lease_tick()
        await asyncio.sleep(0.05)
    await owner.launcher.drain()

    # -- the oracle ----------------------------------------------------------------------------
    runs = {run_id: owner.launcher.get(run_id) for run_id in world.jobs}
    assert len(runs) == len(set(world.jobs)) >= TAKEOVERS
    not_completed = {run_id: (run.status, run.error) for run_id, run in runs.items() if run.status is not RunStatus.COMPLETED}
    assert not not_completed, not_completed
    lines = world.ledger_lines()
    starts = Counter((line["run_id"], line["attempt"]) for line in lines if line["what"] == "start")
    assert [key for key, n in starts.items() if n > 1] == [], "an attempt started twice"
    assert {run_id for run_id, _ in starts} == set(world.jobs), "every launch request executed"
    assert not [host.name for host in world.hosts if host.wrappers()], "a program still going"
    ended_unrecorded = 0
    for run_id, run in runs.items():
        mine = [line for line in lines if line["run_id"] == run_id]
        for index, line in enumerate(mine):  # the ledger is in time order (O_APPEND): no overlap of attempts
            if line["what"] == "end":
                later = [other["attempt"] for other in mine[:index] if other["what"] == "start"
                         and other["attempt"] > line["attempt"]]
                assert not later, f"run {run_id}: attempt {line['attempt']} ran on beside attempts {later}: {mine} {run.attempts}"
        ends = {line["attempt"] for line in mine if line["what"] == "end"}
        assert run.attempt.number in ends and max(ends) == run.attempt.number, (run_id, ends)
        assert all(a.status is RunStatus.LOST for a in run.attempts[:-1]), (run_id, run.attempts)
        for attempt in ends - {run.attempt.number}:  # ended, but its launcher lost the lease before recording it
            assert "lost the lease" in run.attempts[attempt - 1].error, (run_id, run.attempts[attempt - 1])
            ended_unrecorded += 1
    retried = sum(len(run.attempts) > 1 for run in runs.values())
    print(f"runs: {len(runs)}, retried after a LOST attempt: {retried}, program starts: {sum(starts.values())}, "
          f"ended on a host whose launcher lost the lease before recording it (run again): {ended_unrecorded}")
    assert_fenced(world)


def assert_fenced(world: World) -> None:
    """Every run event was appended by the launcher holding the lease at that point of the log."""
    types = EventTypes(lease_domain.EVENTS)
    log = SqliteEventLog(world.root / "events.db", clock=world.clock)
    try:
        current, position, checked, epochs = None, 0, 0, set()
        while batch := log.read_all(position, 10_000):
            for recorded in batch:
                if recorded.stream == LEASE_STREAM:
                    current = lease_domain.evolve(current, types.decode(recorded))
                elif recorded.stream.startswith("run-"):
                    assert recorded.metadata.get(EPOCH_METADATA) == str(current.epoch), \
                        (recorded.stream, recorded.type, recorded.metadata, current.epoch)
                    checked += 1
                    epochs.add(current.epoch)
            position = batch[-1].position
        assert current.epoch == TAKEOVERS + 1 and checked > 0
        assert len(epochs) > TAKEOVERS // 2, "run events under many epochs"
    finally:
        log.close()
