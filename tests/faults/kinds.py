"""The faults the campaign injects. Each one is applied and cleared on the live stack and returns what it
did and when (wall clock) it was cleared: from then on the campaign measures how long until launches flow."""
from __future__ import annotations

import os
import random
import signal
import time
from dataclasses import dataclass

from sluice_services.composition import SERVICES
from tests.faults.stack import Stack


@dataclass(frozen=True)
class Timing:
    postgres_down_s: float = 30.0
    broker_down_s: float = 15.0
    disk_full_s: float = 15.0
    stopped_s: float = 14.0
    """A SIGSTOPped service stays stopped this long: past the bus's Kafka session timeout (10 s)."""


SHORT = Timing(postgres_down_s=5.0, broker_down_s=5.0, disk_full_s=5.0, stopped_s=13.0)


@dataclass(frozen=True)
class Applied:
    kind: str
    detail: str
    began: float
    cleared: float


def postgres_stopped(stack: Stack, rng: random.Random, timing: Timing) -> Applied:
    began = time.time()
    stack.postgres.halt()
    time.sleep(timing.postgres_down_s)
    stack.postgres.resume()
    return Applied("postgres_stopped", f"{timing.postgres_down_s:.0f} s", began, time.time())


def broker_killed(stack: Stack, rng: random.Random, timing: Timing) -> Applied:
    node = rng.choice(stack.kafka.running())
    began = time.time()
    stack.kafka.kill(node)
    time.sleep(timing.broker_down_s)
    stack.kafka.restart(node)
    return Applied("broker_killed", f"node {node}, down {timing.broker_down_s:.0f} s", began, time.time())


def disk_full(stack: Stack, rng: random.Random, timing: Timing) -> Applied:
    began = time.time()
    ballast = stack.disk.fill()
    time.sleep(timing.disk_full_s)
    stack.disk.free()
    detail = f"{ballast >> 20} MiB of ballast, {timing.disk_full_s:.0f} s"
    if stack.postgres._process is None or stack.postgres._process.poll() is not None:
        stack.postgres._process = None
        stack.postgres.resume()  # as an operator would; the campaign reports it
        detail += "; PostgreSQL had stopped and was started again"
    return Applied("disk_full", detail, began, time.time())


def service_stopped(stack: Stack, rng: random.Random, timing: Timing) -> Applied:
    name = rng.choice(sorted(SERVICES))
    pid = stack.services[name].pid
    began = time.time()
    os.kill(pid, signal.SIGSTOP)
    time.sleep(timing.stopped_s)
    os.kill(pid, signal.SIGCONT)
    return Applied("service_stopped", f"{name} SIGSTOP {timing.stopped_s:.0f} s", began, time.time())


def launcher_taken_over(stack: Stack, rng: random.Random, timing: Timing) -> Applied:
    """The launcher's host dies (launcher and programs killed); a launcher on another data dir starts and
    takes the lease over once it expired."""
    began = time.time()
    old = stack.data_dir("launcher").name
    stack.launcher_host_dies()
    stack.start_service("launcher")
    return Applied("launcher_taken_over", f"{old} -> {stack.data_dir('launcher').name}", began, time.time())


KINDS = {apply.__name__: apply for apply in (postgres_stopped, broker_killed, disk_full, service_stopped,
                                             launcher_taken_over)}
