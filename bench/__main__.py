"""`python -m bench [NAME ...] [--runs N] [--list] [sizes]`: run benchmarks, print medians as JSON lines."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Sequence

from bench import BENCHMARKS, Figure, load, progress


ENV_SIZES = ("BENCH_SCHEDULES", "BENCH_NOTIFICATIONS", "BENCH_DATASETS", "BENCH_RUNS")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _rates(text: str) -> list[float]:
    try:
        rates = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not rates or any(rate <= 0 for rate in rates):
        raise argparse.ArgumentTypeError(f"rates must be positive, got {text!r}")
    return rates


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="Sluice benchmarks. Prints one JSON line per figure on stdout (the median over --runs); "
                    "progress and the individual runs go to stderr. Sizes may also come from the environment "
                    "as BENCH_SCHEDULES, BENCH_NOTIFICATIONS, BENCH_DATASETS, BENCH_RUNS "
                    "(e.g. BENCH_SCHEDULES=1000 make bench BENCH=matcher); flags win.",
    )
    p.add_argument("names", nargs="*", metavar="NAME", help=f"benchmarks to run (default: all: {', '.join(BENCHMARKS)})")
    p.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    p.add_argument("--runs", type=_positive, default=None, help="repeat each benchmark N times, report medians (default 3)")
    p.add_argument("--schedules", type=_positive, default=None,
                   help="schedules to register (matcher default 10000, e2e-latency default 10000)")
    p.add_argument("--notifications", type=_positive, default=None,
                   help="notifications to push (matcher default 5000; e2e-latency default 5 s of sending per rate, at least 1000)")
    p.add_argument("--datasets", type=_positive, default=None, help="matcher: datasets the schedules spread over (default 1000)")
    p.add_argument("--rates", type=_rates, default=None,
                   help="e2e-latency, kafka-floor: offered notification rates per second, comma-separated (default 200,1000)")
    p.add_argument("--bus", choices=("all", "file", "memory", "kafka"), default="all",
                   help="e2e-latency: embedded (the in-process bus on a WAL file, or in memory), a real Kafka "
                        "broker with PostgreSQL, or all = file and kafka (default all)")
    p.add_argument("--warm-up", type=_seconds, default=None, dest="warm_up",
                   help="e2e-latency, kafka-floor: seconds of load at each rate before the measured one (default 10)")
    p.add_argument("--full", action="store_true",
                   help="matcher, matcher-bound: the issue's size (100000 schedules, 10000 datasets, 200000 notifications)")
    p.add_argument("--seed", type=int, default=42, help="random seed (default 42)")
    return p


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds of at least 0, got {text!r}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    options = parser().parse_args(argv)
    if options.list:
        for name in BENCHMARKS:
            print(f"{name}\t{load(name).DESCRIPTION}")
        return 0
    unknown = [name for name in options.names if name not in BENCHMARKS]
    if unknown:
        print(f"bench: unknown benchmark {unknown[0]!r} (known: {', '.join(BENCHMARKS)})", file=sys.stderr)
        return 2
    for variable in ENV_SIZES:
        text = os.environ.get(variable)
        if text and not (text.isdigit() and int(text) >= 1):
            print(f"bench: {variable} must be a whole number of at least 1, got {text!r}", file=sys.stderr)
            return 2
    runs = options.runs or int(os.environ.get("BENCH_RUNS") or 3)
    for name in options.names or list(BENCHMARKS):
        for line in run_benchmark(name, options, runs):
            print(line, flush=True)
    return 0


def run_benchmark(name: str, options: argparse.Namespace, runs: int) -> list[str]:
    """Run one benchmark `runs` times; return its JSON lines (median per metric, first run's order)."""
    module = load(name)
    results: list[list[Figure]] = []
    for index in range(1, runs + 1):
        load1, load5, _ = os.getloadavg()
        progress(f"[{name}] run {index}/{runs} ... (load average {load1:.1f}/{load5:.1f} on {os.cpu_count()} CPUs:"
                 " other work on the machine skews the figures)")
        started = time.perf_counter()
        figures = module.run(options)
        progress(f"[{name}] run {index}/{runs} took {time.perf_counter() - started:.1f} s:")
        for figure in figures:
            progress(f"[{name}]   {figure.metric} = {figure.value:.6g} {figure.unit}")
        results.append(figures)
    lines = []
    for figure in results[0]:
        values = [f.value for figures in results for f in figures if f.metric == figure.metric]
        median = statistics.median(values)
        lines.append(json.dumps({"bench": name, "metric": figure.metric, "value": round(median, 3),
                                 "unit": figure.unit, "target": figure.target}))
    return lines


if __name__ == "__main__":
    sys.exit(main())
