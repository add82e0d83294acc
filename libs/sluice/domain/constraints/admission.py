"""Admission: one decision over the whole queue of pending jobs, so concurrency slots and load
are reserved atomically (CDAP checked each job on its own, so two schedules could both take the
last slot).

The checker is the single writer of admissions. Each pass considers every pending job in one
total order -- higher priority first, then earlier trigger, then job id -- against a working
copy of the world, and every admitted job immediately reserves its run there: it counts as
running for the program, for each group the program belongs to, and for the load, and as the
program's latest start. A later job in the same pass therefore sees the slot taken. The order
depends only on the jobs, never on how they were handed in, so the decision is deterministic.

Load (user story 6). `Capacity.limit` is the soft limit: once that many runs are going (running
plus admitted in this pass), normal jobs wait, with no timer, and catch up when runs end -- in
the same order, so the oldest of equal priority goes first. High-priority jobs (priority >=
`Capacity.high_priority`) are not held by the soft limit; they launch on time up to
`Capacity.hard_limit` (None: bounded only by their own concurrency constraints). The headroom
between the two limits is thereby reserved for high-priority work, and because high-priority
jobs come first in every pass a normal job can never take a slot a high-priority job wanted in
the same pass. A steady stream of high-priority work can hold normal jobs back indefinitely;
that is the story's intent (they defer until load drops), and their timeouts still apply.

Timeouts. A job that cannot launch at or after `triggered_at + timeout_seconds` times out; one
that can launch at that pass launches (the timeout bounds waiting, it does not refuse work that
is ready). DISCARD discards it with the constraints it waited for. FORCE_LAUNCH launches it
despite its timing constraints and the soft limit, but never past a concurrency constraint or
the hard limit: those protect correctness and the cluster, so a forced job waits for a slot.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Iterable

from sluice.domain.constraints.evaluation import Never, NotYet, check
from sluice.domain.constraints.facts import PendingJobFacts, WorldFacts, join_groups
from sluice.domain.constraints.specs import ConcurrencyConstraint, TimeoutPolicy
from sluice.domain.triggers.specs import require_aware
from sluice.domain.errors import InvalidArgument


@dataclass(frozen=True)
class Capacity:
    """How many runs may go at once (all programs the checker hears of, whoever launched them)."""

    limit: int | None = None
    """The soft limit: at this many runs, normal-priority jobs wait. None: no soft limit."""
    high_priority: int = 1
    """Jobs with at least this priority are high priority (schedules default to priority 0)."""
    hard_limit: int | None = None
    """The limit for every job, high priority and forced ones included. None: no hard limit."""

    def __post_init__(self) -> None:
        for name in ("limit", "hard_limit"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise InvalidArgument(f"capacity.{name}", f"must be a whole number of at least 1, got {value!r}")
        if self.limit is not None and self.hard_limit is not None and self.hard_limit < self.limit:
            raise InvalidArgument("capacity.hard_limit", f"must be at least the soft limit {self.limit}")

    def limit_for(self, job: PendingJobFacts, forced: bool = False) -> int | None:
        if forced or job.priority >= self.high_priority:
            return self.hard_limit
        limits = [v for v in (self.limit, self.hard_limit) if v is not None]
        return min(limits, default=None)


UNLIMITED = Capacity()


@dataclass(frozen=True)
class Waiting:
    """A job left pending by a pass: until when, and on what (the operators' view)."""

    job_id: str
    next_check: datetime | None
    """When time alone could make it launchable (or time it out); None: only an event can."""
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class AdmissionDecision:
    launch: tuple[str, ...] = ()
    """Job ids to launch, in admission order (launch requests should go out in this order)."""
    discard: tuple[tuple[str, str], ...] = ()
    """(job id, reason) of jobs to discard, in admission order."""
    wake_at: datetime | None = None
    """The earliest `next_check` among waiting jobs: when to run the next pass if no event comes."""
    waiting: tuple[Waiting, ...] = ()
    forced: tuple[str, ...] = ()
    """The launched jobs that were forced by their timeout (a subset of `launch`)."""


@dataclass(frozen=True)
class _Launch:
    forced: bool = False


@dataclass(frozen=True)
class _Discard:
    reason: str


def order_key(job: PendingJobFacts) -> tuple:
    """Higher priority first, then the earlier trigger, then one schedule's jobs in the order they
    fired, then the job id: a total order."""
    return (-job.priority, job.triggered_at, job.schedule_id, job.sequence, job.job_id)


def admit(pending_jobs: Iterable[PendingJobFacts], world: WorldFacts, now: datetime,
          capacity: Capacity = UNLIMITED) -> AdmissionDecision:
    """Decide, in one pass over all pending jobs, which launch now, which are discarded, and when
    to look again. Pure and deterministic: the input order of `pending_jobs` does not matter."""
    require_aware(now)
    jobs = sorted(pending_jobs, key=order_key)
    ids = [job.job_id for job in jobs]
    if len(set(ids)) != len(ids):
        raise ValueError("pending jobs must have distinct ids")
    for job in jobs:
        world = join_groups(world, job.program, job.constraints)
    load = world.running_total()
    # Nothing in a pass of jobs without constraints, under no limit, reads the world: no run reserved.
    reserving = capacity.limit is not None or capacity.hard_limit is not None or any(job.constraints for job in jobs)
    launch, forced, discard, waiting = [], [], [], []
    same: dict[tuple, _Discard | Waiting] = {}
    """Outcomes by `_alike` key while the world stays as it is: a backfill's thousands of jobs alike
    are checked once per pass, not once each."""
    for job in jobs:
        key = _alike(job)
        outcome = same.get(key)
        if isinstance(outcome, Waiting):
            outcome = Waiting(job.job_id, outcome.next_check, outcome.reasons)
        elif outcome is None:
            outcome = _decide(job, world, now, capacity, load)
            if not (reserving and isinstance(outcome, _Launch)):  # a launch that reserves changes the world
                same[key] = outcome
        if isinstance(outcome, _Launch):
            if reserving:
                reserved = world.reserve(job.program, job.run_id, now)
                load += reserved is not world
                world = reserved
                same.clear()
            launch.append(job.job_id)
            if outcome.forced:
                forced.append(job.job_id)
        elif isinstance(outcome, _Discard):
            discard.append((job.job_id, outcome.reason))
        else:
            waiting.append(outcome)
    wakes = [w.next_check for w in waiting if w.next_check is not None]
    return AdmissionDecision(tuple(launch), tuple(discard), min(wakes, default=None), tuple(waiting), tuple(forced))


def _alike(job: PendingJobFacts) -> tuple:
    """Everything of the job `_decide` reads besides the world: jobs with equal keys get the same
    outcome in the same world. Objects by identity (alive through the pass): a backfill's jobs share
    their program, constraints and trigger time, and hashing those by value cost more than it saved."""
    return (id(job.program), id(job.constraints), id(job.triggered_at), job.checked_before, job.timeout_seconds,
            id(job.timeout_policy), job.priority)


def _decide(job: PendingJobFacts, world: WorldFacts, now: datetime, capacity: Capacity,
            load: int) -> _Launch | _Discard | Waiting:
    verdicts = [(constraint, check(constraint, job, world, now)) for constraint in job.constraints]
    never = next((v for _, v in verdicts if isinstance(v, Never)), None)
    if never is not None:
        return _Discard(never.reason)
    blocked = [(c, v) for c, v in verdicts if isinstance(v, NotYet)]
    overload = _load(load, capacity.limit_for(job))
    if not blocked and overload is None:
        return _Launch()
    deadline = job.deadline
    if deadline is not None and now >= deadline:
        return _timed_out(job, blocked, overload, load, capacity)
    waits = [v for _, v in blocked] + ([overload] if overload else [])
    times = [v.next_check for v in waits]
    by_time = None if None in times else max(times)  # launchable no earlier than its last blocker clears
    candidates = [t for t in (by_time, deadline) if t is not None]
    return Waiting(job.job_id, min(candidates, default=None), tuple(v.reason for v in waits))


def _timed_out(job: PendingJobFacts, blocked: list, overload: NotYet | None, load: int,
               capacity: Capacity) -> _Launch | _Discard | Waiting:
    if job.timeout_policy is TimeoutPolicy.DISCARD:
        reasons = [v.reason for _, v in blocked] + ([overload.reason] if overload else [])
        return _Discard(f"timed out {job.timeout_seconds} s after its trigger, still waiting for: "
                        + "; ".join(reasons))
    hard = [v for c, v in blocked if isinstance(c, ConcurrencyConstraint)]
    over_hard = _load(load, capacity.limit_for(job, forced=True))
    hard += [over_hard] if over_hard else []
    if not hard:
        return _Launch(forced=True)
    return Waiting(job.job_id, None, tuple(f"timed out, forced launch waits for: {v.reason}" for v in hard))


def _load(load: int, limit: int | None) -> NotYet | None:
    if limit is None or load < limit:
        return None
    return NotYet(None, f"load: {load} runs going, limit {limit}")
