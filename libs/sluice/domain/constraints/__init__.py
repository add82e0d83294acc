"""Run constraints as pure data, their pure evaluation, and atomic admission over the job queue.

    constraints = (ConcurrencyConstraint(1, group="nightly"),
                   TimeWindowConstraint("22:00", "06:00", "America/New_York"))
    validate_constraints(constraints)              # InvalidArgument("schedule.constraints[1]....", ...)
    job = PendingJobFacts("j1", program, "s1", triggered_at, constraints, priority=0, timeout_seconds=3600)
    world = WorldFacts().observe(program, run_id, RunStatus.RUNNING, at)   # folded from run status
    check(constraints[1], job, world, now)         # SATISFIED | NotYet(next_check) | Never(reason)
    decision = admit([job, ...], world, now, Capacity(limit=20, high_priority=10, hard_limit=30))
    decision.launch, decision.discard, decision.wake_at
    world = world.reserve(program, job.run_id, now)   # the checker folds its own admissions
"""
from sluice.domain.constraints.admission import (
    UNLIMITED,
    AdmissionDecision,
    Capacity,
    Waiting,
    admit,
    order_key,
)
from sluice.domain.constraints.evaluation import SATISFIED, Never, NotYet, Satisfied, Verdict, check
from sluice.domain.constraints.facts import (
    PendingJobFacts,
    RunRecord,
    WorldFacts,
    history_needed,
    join_groups,
)
from sluice.domain.constraints.specs import (
    KINDS,
    UNITS,
    ConcurrencyConstraint,
    Constraint,
    DelayConstraint,
    MaxRunsPerWindowConstraint,
    MinSinceLastRunConstraint,
    NotMetPolicy,
    TimeoutPolicy,
    TimeWindowConstraint,
)
from sluice.domain.constraints.validation import validate_constraint, validate_constraints

__all__ = [
    "KINDS", "UNITS",
    "Constraint", "ConcurrencyConstraint", "DelayConstraint", "TimeWindowConstraint",
    "MinSinceLastRunConstraint", "MaxRunsPerWindowConstraint", "NotMetPolicy", "TimeoutPolicy",
    "validate_constraint", "validate_constraints",
    "PendingJobFacts", "RunRecord", "WorldFacts", "history_needed", "join_groups",
    "Verdict", "Satisfied", "SATISFIED", "NotYet", "Never", "check",
    "Capacity", "UNLIMITED", "Waiting", "AdmissionDecision", "admit", "order_key",
]
