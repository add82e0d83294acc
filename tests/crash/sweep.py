"""The crash sweep: crash points drawn from a seed, each run judged against the oracle.

    python -m tests.crash.sweep --backend sqlite --points 500            # what `make crash-test` runs
    python -m tests.crash.sweep --backend sqlite --run-seed 123456        # replay one run of a sweep
    python -m tests.crash.sweep --backend sqlite --point checker.log.append:after@20   # chosen points

The oracle (no crashes) is run first on the backend; its boundary crossings are the space points
are drawn from: a boundary uniformly among all of them (so rare boundaries such as the registry's
get as many points as the busy ones), then the crossing uniformly among the oracle's. A run arms
`--per-run` points and has its own seed (its points and its step order); a failing run prints it.

Each backend's points are split between the matcher's two compositions (`--matcher`): one member
deciding as it looks up (embedded mode's), and two stages over the matches topic (Kafka's)."""
from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from sluice.eventlog.postgres import PostgresEventLog
from sluice.eventlog.sqlite import SqliteEventLog
from tests.support.faults import CrashPoint
from tests.crash import harness
from tests.crash.cluster import SERVICES
from tests.crash.workload import Workload, build

BACKENDS = ("sqlite", "postgres")
MATCHERS = {"one-member": True, "two-stages": False}
"""--matcher: composition name -> matcher_spec's one_member."""


@dataclass
class RunReport:
    run_seed: int
    armed: tuple[CrashPoint, ...]
    fired: list[CrashPoint]
    verdict: harness.Verdict


@dataclass
class SweepReport:
    backend: str
    matcher: str = "one-member"
    oracle_launches: int = 0
    boundaries: int = 0
    runs: list[RunReport] = field(default_factory=list)

    @property
    def points(self) -> int:
        return sum(len(r.fired) for r in self.runs)

    def total(self, name: str) -> int:
        return sum(getattr(r.verdict, name) for r in self.runs)

    @property
    def mismatched_runs(self) -> int:
        return sum(1 for r in self.runs if r.verdict.mismatches)

    @property
    def failed(self) -> list[RunReport]:
        return [r for r in self.runs if not r.verdict.ok]

    def covered(self) -> Counter:
        return Counter(p.boundary for r in self.runs for p in r.fired)

    def summary(self) -> str:
        return (f"{self.backend}, {self.matcher} matcher: {self.points} crash points run ({len(self.runs)} runs, "
                f"{len(self.covered())} of {self.boundaries} boundaries), oracle launches {self.oracle_launches}; "
                f"lost {self.total('lost')}, "
                f"duplicate {self.total('duplicate')}, spurious {self.total('spurious')}, stuck {self.total('stuck')}, "
                f"state mismatches {sum(len(r.verdict.mismatches) for r in self.runs)} "
                f"(in {self.mismatched_runs} runs); failed runs {len(self.failed)} of {len(self.runs)}, "
                f"by service crashed: {self.failures_by_service()}")

    def failures_by_service(self) -> str:
        """Failed runs per service whose boundaries crashed in them (a run crashes several)."""
        failed = Counter(service for r in self.failed for service in {p.boundary.split(".")[0] for p in r.fired})
        total = Counter(service for r in self.runs for service in {p.boundary.split(".")[0] for p in r.fired})
        return ", ".join(f"{service} {failed[service]}/{total[service]}" for service in sorted(total))


def draw_points(crossings: Counter, run_seed: int, count: int, services: tuple[str, ...] = ()) -> tuple[CrashPoint, ...]:
    """`count` points (fewer when two draws coincide), on the boundaries of `services` (all when empty)."""
    rng = random.Random(run_seed)
    boundaries = sorted(b for b in crossings if not services or b.split(".", 1)[0] in services)
    points = {CrashPoint(b, rng.randint(1, crossings[b])) for b in (rng.choice(boundaries) for _ in range(count))}
    return tuple(sorted(points))


class Backend:
    """Makes a fresh, empty event log per run on the backend."""

    def __init__(self, name: str, stack: ExitStack) -> None:
        if name not in BACKENDS:
            raise ValueError(f"--backend: {name!r} is not one of {', '.join(BACKENDS)}")
        self.name = name
        self._server = None
        if name == "postgres":
            from tests.support.postgres import PostgresServer
            self._server = stack.enter_context(PostgresServer())

    def make_log(self, clock, work_dir: Path):
        if self._server is None:
            return SqliteEventLog(work_dir / "events.db", clock=clock)
        # synchronous_commit on, as a production server has it: the consumers' deferred appends then flush
        return PostgresEventLog(self._server.create_database() + " options='-c synchronous_commit=on'", clock=clock)


async def sweep(backend: Backend, workload: Workload, work_root: Path, *, points: int, per_run: int, seed: int,
                run_seeds: list[int] | None = None, chosen: tuple[CrashPoint, ...] = (), services: tuple[str, ...] = (),
                matcher: str = "one-member", progress=lambda report: None) -> SweepReport:
    one_member = MATCHERS[matcher]
    oracle = await harness.run(workload, backend.make_log, work_root / "oracle", order_seed=seed, one_member=one_member)
    report = SweepReport(backend.name, matcher, sum(oracle.launches.values()), len(oracle.crossings))
    rng = random.Random(seed)
    index = 0
    while True:
        if chosen or run_seeds is not None:
            if index >= max(len(run_seeds or ()), 1 if chosen else 0):
                break
            run_seed = run_seeds[index] if run_seeds else seed
            armed = chosen or draw_points(oracle.crossings, run_seed, per_run, services)
        else:
            if report.points >= points:
                break
            run_seed = rng.randrange(1, 2**31)
            armed = draw_points(oracle.crossings, run_seed, per_run, services)
        run_dir = work_root / f"run-{index}"
        outcome = await harness.run(workload, backend.make_log, run_dir, armed, order_seed=run_seed,
                                    one_member=one_member)
        shutil.rmtree(run_dir, ignore_errors=True)
        report.runs.append(RunReport(run_seed, armed, outcome.fired, harness.judge(oracle, outcome)))
        progress(report)
        index += 1
    return report


def describe_failure(report: SweepReport, run: RunReport, args: argparse.Namespace) -> str:
    v = run.verdict
    lines = [f"FAILED run seed {run.run_seed} ({report.backend}): lost {v.lost}, duplicate {v.duplicate}, "
             f"spurious {v.spurious}, stuck {v.stuck}, mismatches {len(v.mismatches)}",
             f"  crashed at: {' '.join(str(p) for p in run.fired) or '(none fired)'}",
             f"  replay: make crash-test BACKEND={report.backend} MATCHER={report.matcher} SEED={args.seed} "
             f"RUN_SEED={run.run_seed}"
             f"   (one point alone: POINT=<boundary@n>)"]
    lines += [f"  {m}" for m in v.mismatches[:args.show]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.crash.sweep", description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", action="append", choices=BACKENDS, help="repeatable; default: both")
    parser.add_argument("--matcher", action="append", choices=tuple(MATCHERS),
                        help="the matcher's composition, repeatable; default: both, splitting the points")
    parser.add_argument("--points", type=int, default=500, help="crash points to run per backend (default 500)")
    parser.add_argument("--per-run", type=int, default=10, help="crash points armed per run (default 10)")
    parser.add_argument("--seed", type=int, default=1, help="the sweep's seed: workload, oracle order, run seeds")
    parser.add_argument("--run-seed", type=int, action="append", help="replay these runs of the sweep only")
    parser.add_argument("--point", action="append", default=[], help="arm exactly these points (BOUNDARY@N)")
    parser.add_argument("--service", action="append", choices=SERVICES, help="crash only these (repeatable)")
    parser.add_argument("--notifications", type=int, default=1000)
    parser.add_argument("--hours", type=int, default=12)
    parser.add_argument("--show", type=int, default=5, help="mismatches shown per failed run")
    args = parser.parse_args(argv)
    try:
        chosen = tuple(CrashPoint.parse(p) for p in args.point)
    except ValueError as error:
        parser.error(f"--point: {error}")
    workload = build(args.seed, args.notifications, args.hours)
    print(f"workload: seed {args.seed}, {len(workload.notifications)} partition notifications, "
          f"{workload.schedules} schedules, {args.hours} simulated hours", flush=True)
    failed = False
    matchers = args.matcher or tuple(MATCHERS)
    for name in args.backend or BACKENDS:
        for matcher in matchers:
            started = time.monotonic()
            with ExitStack() as stack, tempfile.TemporaryDirectory(prefix=f"sluice-crash-{name}-") as work:
                backend = Backend(name, stack)

                def progress(report: SweepReport) -> None:
                    last = report.runs[-1]
                    mark = "ok" if last.verdict.ok else "FAILED"
                    print(f"  {name}/{matcher} run {len(report.runs)} seed {last.run_seed}: {len(last.fired)} crashes, "
                          f"{mark} ({report.points} points, {time.monotonic() - started:.0f}s)", flush=True)

                report = asyncio.run(sweep(backend, workload, Path(work), points=args.points // len(matchers),
                                           per_run=args.per_run, seed=args.seed, run_seeds=args.run_seed,
                                           chosen=chosen, services=tuple(args.service or ()), matcher=matcher,
                                           progress=progress))
            for run in report.failed:
                print(describe_failure(report, run, args))
            print(report.summary() + f" in {time.monotonic() - started:.0f}s", flush=True)
            failed |= bool(report.failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
