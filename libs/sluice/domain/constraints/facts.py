"""What the checker knows when it checks constraints: the pending job, and the world of runs.

`WorldFacts` is folded from run-status events (`observe`) and from the checker's own admissions
(`reserve`, under the id the launcher will give the run, so the run's STARTING event later finds
it and changes nothing). Every update returns a new value and leaves the old one untouched; an
update that changes nothing returns the same object. Out-of-order events are fine: an end seen
before its start is remembered, and the late start then only fills in the start time.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import cached_property
from typing import Iterable, Mapping

from sluice.domain.common import ProgramRef, RunStatus
from sluice.domain.constraints.specs import (
    ConcurrencyConstraint,
    Constraint,
    MaxRunsPerWindowConstraint,
    MinSinceLastRunConstraint,
    TimeoutPolicy,
)
from sluice.ids import run_id_for
from sluice.domain.triggers.specs import require_aware


@dataclass(frozen=True)
class PendingJobFacts:
    """A job waiting for its run constraints, as the checker sees it."""

    job_id: str
    program: ProgramRef
    schedule_id: str
    triggered_at: datetime
    """When the trigger fired: delays and timeouts count from here."""
    constraints: tuple[Constraint, ...] = ()
    priority: int = 0
    """Higher is more urgent; see `Capacity.high_priority` for what counts as high."""
    timeout_seconds: int = 0
    """How long the job may wait for its constraints after `triggered_at`; 0 waits forever."""
    timeout_policy: TimeoutPolicy = TimeoutPolicy.DISCARD
    checked_before: bool = False
    """Whether an earlier admission pass already checked the job and left it waiting. The
    checker sets it when it records the job as waiting; ABORT constraints act only while False."""
    sequence: int = 0
    """The job's number among its schedule's jobs: one schedule's jobs triggered at one instant (the
    catch-up fires of FIRE_EACH) are admitted in the order they fired, their logical times' order."""

    def __post_init__(self) -> None:
        require_aware(self.triggered_at)
        object.__setattr__(self, "constraints", tuple(self.constraints))

    @property
    def deadline(self) -> datetime | None:
        return self.triggered_at + timedelta(seconds=self.timeout_seconds) if self.timeout_seconds > 0 else None

    @property
    def run_id(self) -> str:
        """The id the launcher gives the job's run (one run per job)."""
        return run_id_for(self.job_id)


@dataclass(frozen=True)
class RunRecord:
    """One run of a program that the checker has heard of."""

    run_id: str
    started_at: datetime | None = None
    """When it started (or was admitted by the checker); None while only its end has been seen."""
    ended: bool = False


@dataclass(frozen=True)
class WorldFacts:
    """Runs per program (the running ones, and ended ones inside the history horizon), and which
    programs belong to which concurrency group (from the schedules' constraints)."""

    runs: Mapping[ProgramRef, tuple[RunRecord, ...]] = field(default_factory=dict)
    groups: Mapping[str, frozenset[ProgramRef]] = field(default_factory=dict)

    # Queries
    def running(self, program: ProgramRef) -> int:
        """From the program's runs alone: an admission pass asks after each run it reserves, and
        counting every program's there made admitting k jobs cost k times the programs."""
        return sum(1 for run in self.runs.get(program, ()) if not run.ended)

    def running_in(self, programs: Iterable[ProgramRef]) -> int:
        return sum(self.running(program) for program in set(programs))

    @cached_property
    def _group_running(self) -> dict[str, int]:
        return {group: self.running_in(members) for group, members in self.groups.items()}

    def running_in_group(self, group: str, program: ProgramRef) -> int:
        """Running runs of the group's members, `program` counted as one of them."""
        count = self._group_running.get(group, 0)
        return count if program in self.members(group) else count + self.running(program)

    def running_total(self) -> int:
        return self.running_in(self.runs)

    def members(self, group: str) -> frozenset[ProgramRef]:
        return self.groups.get(group, frozenset())

    def last_start(self, program: ProgramRef) -> datetime | None:
        starts = [run.started_at for run in self.runs.get(program, ()) if run.started_at is not None]
        return max(starts, default=None)

    def starts_between(self, program: ProgramRef, start: datetime, end: datetime) -> int:
        """How many runs of the program started in [start, end)."""
        return sum(1 for run in self.runs.get(program, ())
                   if run.started_at is not None and start <= run.started_at < end)

    # Updates (folds)
    def observe(self, program: ProgramRef, run_id: str, status: RunStatus, at: datetime) -> WorldFacts:
        """Fold a program-status event, `at` being the time of its notification."""
        require_aware(at)
        runs = self.runs.get(program, ())
        index = next((i for i, run in enumerate(runs) if run.run_id == run_id), None)
        old = runs[index] if index is not None else None
        if status.terminal:
            new = RunRecord(run_id, old.started_at if old else None, ended=True)
        else:
            new = RunRecord(run_id, at, ended=False) if old is None else (
                replace(old, started_at=at) if old.started_at is None else old)
        if new == old:
            return self
        updated = runs[:index] + (new,) + runs[index + 1:] if index is not None else runs + (new,)
        return replace(self, runs={**self.runs, program: updated})

    def reserve(self, program: ProgramRef, run_id: str, at: datetime) -> WorldFacts:
        """The checker admitted a job: its run counts as started and running from `at`."""
        return self.observe(program, run_id, RunStatus.STARTING, at)

    def join(self, group: str, program: ProgramRef) -> WorldFacts:
        """`program` belongs to `group` (a schedule of it names the group)."""
        members = self.members(group)
        if program in members:
            return self
        return replace(self, groups={**self.groups, group: members | {program}})

    def leave(self, group: str, program: ProgramRef) -> WorldFacts:
        """No schedule of `program` names `group` any more."""
        members = self.members(group)
        if program not in members:
            return self
        groups = {**self.groups, group: members - {program}}
        return replace(self, groups={name: m for name, m in groups.items() if m})

    def forget(self, before: datetime, programs: Iterable[ProgramRef] | None = None) -> WorldFacts:
        """Drop ended runs that started before `before` (or whose start was never seen), of
        `programs` (None: of all): the checker calls it with `now - history_needed(...)` for the
        program whose run ended, to bound its state. Running runs stay."""
        runs = None
        for program in self.runs if programs is None else programs:
            records = self.runs.get(program, ())
            kept = tuple(r for r in records if not r.ended or (r.started_at is not None and r.started_at >= before))
            if len(kept) == len(records):
                continue
            runs = dict(self.runs) if runs is None else runs
            if kept:
                runs[program] = kept
            else:
                del runs[program]
        return self if runs is None else replace(self, runs=runs)


def join_groups(world: WorldFacts, program: ProgramRef, constraints: Iterable[Constraint]) -> WorldFacts:
    """Put `program` into every group its (schedule's) concurrency constraints name."""
    for constraint in constraints:
        if isinstance(constraint, ConcurrencyConstraint) and constraint.group:
            world = world.join(constraint.group, program)
    return world


def history_needed(constraints: Iterable[Constraint]) -> timedelta:
    """How far back run starts must be kept for these constraints: the longest minimum interval,
    and a day and a half for per-day caps (a local day can span 25 hours, and more where a zone
    changes its offset by more than an hour), an hour and a half for per-hour caps."""
    needed = timedelta(0)
    for constraint in constraints:
        if isinstance(constraint, MinSinceLastRunConstraint):
            needed = max(needed, timedelta(seconds=constraint.min_seconds))
        elif isinstance(constraint, MaxRunsPerWindowConstraint):
            needed = max(needed, timedelta(hours=36 if constraint.unit == "day" else 1.5))
    return needed
