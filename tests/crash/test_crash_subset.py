"""The CI subset of the crash sweep (`make crash-test` runs the full one): a smaller workload, three
runs of ten seeded crash points each (any service's boundaries), on SQLite and on a real
PostgreSQL server, with each of the matcher's compositions."""
from __future__ import annotations

import pytest

from sluice.eventlog.postgres import PostgresEventLog
from sluice.eventlog.sqlite import SqliteEventLog
from tests.support.faults import CrashPoint
from tests.crash import harness
from tests.crash.sweep import SweepReport, sweep
from tests.crash.workload import build

SEED = 7
RUNS = 3
PER_RUN = 10
WORKLOAD = build(SEED, notifications=150, hours=4)


class _Backend:
    def __init__(self, name: str, postgres=None) -> None:
        self.name = name
        self._postgres = postgres

    def make_log(self, clock, work_dir):
        if self._postgres is None:
            return SqliteEventLog(work_dir / "events.db", clock=clock)
        # synchronous_commit on, as a production server has it: the consumers' deferred appends then flush
        return PostgresEventLog(self._postgres.create_database() + " options='-c synchronous_commit=on'", clock=clock)


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request):
    if request.param == "postgres":
        return _Backend("postgres", request.getfixturevalue("postgres"))
    return _Backend("sqlite")


def _failures(report: SweepReport) -> str:
    return "\n".join(
        f"run seed {r.run_seed} crashed at {' '.join(map(str, r.fired))}: lost {r.verdict.lost}, duplicate "
        f"{r.verdict.duplicate}, spurious {r.verdict.spurious}, stuck {r.verdict.stuck}, "
        f"{r.verdict.mismatches[:3]}\n  replay: make crash-test BACKEND={report.backend} MATCHER={report.matcher} "
        f"SEED={SEED} RUN_SEED={r.run_seed} CRASH_ARGS='--notifications 150 --hours 4'"
        for r in report.failed)


@pytest.mark.parametrize("matcher", ["one-member", "two-stages"])
async def test_seeded_crashes_of_every_service_change_nothing_the_oracle_decided(backend, matcher, tmp_path):
    run_seeds = [SEED * 1000 + i for i in range(RUNS)]
    report = await sweep(backend, WORKLOAD, tmp_path, points=0, per_run=PER_RUN, seed=SEED, run_seeds=run_seeds,
                         matcher=matcher)
    assert report.oracle_launches > 20 and report.points >= RUNS * PER_RUN * 2 // 3, report.summary()
    assert not report.failed, _failures(report)


async def test_the_oracle_does_not_depend_on_the_order_services_are_stepped_in(tmp_path):
    """Without it, a crash run (stepped in another order after each restart) could not be judged."""
    backend = _Backend("sqlite")
    first = await harness.run(WORKLOAD, backend.make_log, tmp_path / "a", order_seed=1)
    second = await harness.run(WORKLOAD, backend.make_log, tmp_path / "b", order_seed=2)
    verdict = harness.judge(first, second)
    assert verdict.ok, verdict
    assert sum(first.launches.values()) > 20


async def test_an_armed_point_crashes_its_service_which_recovers_from_the_log(tmp_path):
    backend = _Backend("sqlite")
    oracle = await harness.run(WORKLOAD, backend.make_log, tmp_path / "oracle")
    point = CrashPoint("checker.log.append:after", oracle.crossings["checker.log.append:after"] // 2)
    crashed = await harness.run(WORKLOAD, backend.make_log, tmp_path / "crashed", (point,))
    assert crashed.fired == [point]
    assert harness.judge(oracle, crashed).ok


async def test_the_oracle_catches_a_launcher_that_cannot_find_its_programs_after_a_crash(tmp_path):
    """The harness has teeth: programs started without the supervise wrapper's promises are started
    again (duplicate) or taken for LOST (stuck downstream, states differ) when the launcher crashes
    inside a launch; with them, the same crashes change nothing."""
    backend = _Backend("sqlite")
    oracle = await harness.run(WORKLOAD, backend.make_log, tmp_path / "oracle")
    submitted = CrashPoint("launcher.program.submit:after", 5)
    blind = await harness.run(WORKLOAD, backend.make_log, tmp_path / "blind", (submitted,), supervised_programs=False)
    assert blind.fired == [submitted] and harness.judge(oracle, blind).duplicate >= 1
    running = CrashPoint("launcher.program.wait:before", 5)
    blind = await harness.run(WORKLOAD, backend.make_log, tmp_path / "blind-wait", (running,), supervised_programs=False)
    assert harness.judge(oracle, blind).mismatches
    supervised = await harness.run(WORKLOAD, backend.make_log, tmp_path / "supervised", (submitted, running))
    assert len(supervised.fired) == 2 and harness.judge(oracle, supervised).ok
