"""Sluice benchmarks: `python -m bench [NAME ...]` (all when none), or `make bench BENCH=<name>`.

Each benchmark module exposes `DESCRIPTION` and `run(options) -> list[Figure]`; the harness
(bench/__main__.py) repeats it `--runs` times and prints the median of every figure as one JSON
line on stdout: {"bench", "metric", "value", "unit", "target"}. Progress goes to stderr.
Benchmarks only use temporary directories and loopback.
"""
from __future__ import annotations

import asyncio
import importlib
import math
import os
import sys
from dataclasses import dataclass
from types import ModuleType

BENCHMARKS: dict[str, str] = {
    "matcher": "bench.matcher",
    "e2e-latency": "bench.e2e_latency",
    "consume": "bench.consume",
    "timers": "bench.timers",
    "replay": "bench.replay",
    "append": "bench.append",
    "lineage": "bench.lineage",
    "followers": "bench.followers",
    "checker": "bench.checker",
    "matcher-bound": "bench.matcher_bound",
    "kafka-floor": "bench.kafka_floor",
    "console": "bench.console",
}
"""Benchmark name -> module; `python -m bench` runs them in this order."""


@dataclass(frozen=True)
class Figure:
    metric: str
    value: float
    unit: str
    target: float | None = None
    """The goal for this figure, or None where the project sets none."""


def load(name: str) -> ModuleType:
    return importlib.import_module(BENCHMARKS[name])


def progress(message: str) -> None:
    """Diagnostics go to stderr only: stdout carries nothing but the JSON figures."""
    print(message, file=sys.stderr, flush=True)


def option(options: object, name: str, default: int) -> int:
    """A size from the command line, else from BENCH_<NAME> in the environment, else the default."""
    value = getattr(options, name, None)
    if value is None:
        env = os.environ.get(f"BENCH_{name.upper()}")
        value = int(env) if env else default
    if value < 1:
        raise ValueError(f"--{name} must be at least 1, got {value}")
    return value


async def deliver(handler, poll: list) -> None:
    """What the consumer loop does with a poll's run of one topic (runtime.consumer._handle_batch):
    parse every record, apply them together; then the event loop turns, as it does before the next poll
    (a snapshot packed meanwhile takes a chunk per turn: sluice.runtime.snapshots.LoopPacer)."""
    await handler.apply([(record, handler.parse(record)) for record in poll])
    await asyncio.sleep(0)


def percentile(values: list[float], percent: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(percent / 100 * len(ordered)) - 1)]
