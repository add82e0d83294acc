"""Is one run constraint met for a pending job at `now`, and if not, when may that change?"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import lru_cache

from sluice.domain.constraints.clock import in_window, next_opening, parse_hh_mm, window_bounds
from sluice.domain.constraints.facts import PendingJobFacts, WorldFacts
from sluice.domain.constraints.specs import (
    ConcurrencyConstraint,
    Constraint,
    DelayConstraint,
    MaxRunsPerWindowConstraint,
    MinSinceLastRunConstraint,
    NotMetPolicy,
    TimeWindowConstraint,
)
from sluice.domain.triggers.cron import zone_of
from sluice.domain.triggers.specs import require_aware


@dataclass(frozen=True)
class Satisfied:
    """The constraint is met now."""


@dataclass(frozen=True)
class NotYet:
    """Not met now. `next_check` is the exact instant at which time alone may change the answer
    (the window opens, the delay ends, the day rolls over, ...), or None when only an event (a
    run ending, a run starting elsewhere) can. Before `next_check` the answer stays NotYet."""

    next_check: datetime | None
    reason: str = field(default="", compare=False)
    """For people (the operators' view of what a job waits on); equality is by meaning."""


@dataclass(frozen=True)
class Never:
    """Will not be met for this job: the job is discarded with `reason`."""

    reason: str = field(default="", compare=False)


Verdict = Satisfied | NotYet | Never
SATISFIED = Satisfied()


def check(constraint: Constraint, job: PendingJobFacts, world: WorldFacts, now: datetime) -> Verdict:
    """Pure: the same constraint, job, world and `now` always give the same verdict.

    An unmet ABORT constraint gives Never at the job's first check (`job.checked_before` False),
    and waits like WAIT afterwards."""
    require_aware(now)
    verdict = _check(constraint, job, world, now)
    if isinstance(verdict, NotYet) and constraint.on_not_met is NotMetPolicy.ABORT and not job.checked_before:
        return Never(f"{verdict.reason} at the first check (on_not_met=ABORT)")
    return verdict


def _check(constraint: Constraint, job: PendingJobFacts, world: WorldFacts, now: datetime) -> Verdict:
    match constraint:
        case ConcurrencyConstraint():
            return _concurrency(constraint, job, world)
        case DelayConstraint(seconds=seconds):
            due = job.triggered_at + timedelta(seconds=seconds)
            return SATISFIED if now >= due else NotYet(due, f"delayed {seconds} s after the trigger")
        case TimeWindowConstraint():
            return _time_window(constraint, now)
        case MinSinceLastRunConstraint(min_seconds=seconds):
            last = world.last_start(job.program)
            due = last + timedelta(seconds=seconds) if last is not None else None
            if due is None or now >= due:
                return SATISFIED
            return NotYet(due, f"last run of {job.program.qualified()} started less than {seconds} s ago")
        case MaxRunsPerWindowConstraint():
            return _max_runs(constraint, job, world, now)
    raise TypeError(f"unknown constraint {constraint!r}")


def _concurrency(constraint: ConcurrencyConstraint, job: PendingJobFacts, world: WorldFacts) -> Verdict:
    """Counts the runs of the job's program, or with a group of every member of the group (the
    job's program is one, by its own constraint)."""
    if constraint.group:
        running = world.running_in_group(constraint.group, job.program)
    else:
        running = world.running(job.program)
    if running < constraint.max_running:
        return SATISFIED
    scope = f"group {constraint.group!r}" if constraint.group else job.program.qualified()
    return NotYet(None, f"{running} of at most {constraint.max_running} runs of {scope} running")


@lru_cache(maxsize=1024)
def _time_window(constraint: TimeWindowConstraint, now: datetime) -> Verdict:
    """Cached: an admission pass asks it for every waiting job at one `now`, and jobs share windows."""
    start, end, zone = parse_hh_mm(constraint.start), parse_hh_mm(constraint.end), zone_of(constraint.zone)
    if in_window(now, start, end, zone):
        return SATISFIED
    return NotYet(next_opening(now, start, end, zone),
                  f"outside the window {constraint.start}-{constraint.end} {constraint.zone}")


def _max_runs(constraint: MaxRunsPerWindowConstraint, job: PendingJobFacts, world: WorldFacts,
              now: datetime) -> Verdict:
    start, end = window_bounds(now, constraint.unit, zone_of(constraint.zone))
    started = world.starts_between(job.program, start, end)
    if started < constraint.max_runs:
        return SATISFIED
    return NotYet(end, f"{started} of at most {constraint.max_runs} runs of {job.program.qualified()} "
                       f"this {constraint.unit} ({constraint.zone})")
