"""Jobs: one activation of a schedule, and the trigger context handed to its program."""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Mapping

from sluice.domain.bounds import MAX_DURATION_SECONDS
from sluice.domain.common import Notification, PartitionCommitted, PartitionRef, ProgramRef
from sluice.domain.constraints.specs import Constraint, TimeoutPolicy


@dataclass(frozen=True)
class RetryPolicy:
    """What the launcher does when an attempt of a run ends LOST (the launcher lost track of the
    process: it vanished without an exit status) or FAILED: with retries left it starts another
    attempt of the same run after a delay; the run's history keeps every attempt, and the run is
    reported ended (to the checker, to program-status triggers) once, with its last attempt's status.
    The default retries a LOST attempt twice (after 60 s, then 120 s) and never a FAILED one."""

    max_retries: int = 2
    """Attempts after the first one, at most; 0 never retries."""
    delay_seconds: int = 60
    """Wait before the first retry."""
    backoff: float = 2.0
    """Each further retry waits this many times longer than the one before (1: a constant delay)."""
    retry_failed: bool = False
    """Whether a FAILED attempt (the program exited non-zero) is retried too; LOST always is.
    Failures to publish outputs are never retried: the program's result would not change."""

    def delay_before(self, retry: int) -> float:
        """Seconds to wait before retry number `retry` (1, 2, ...), at most bounds.MAX_DURATION_SECONDS."""
        try:
            delay = self.delay_seconds * self.backoff ** (retry - 1)
        except OverflowError:
            delay = math.inf
        return min(delay, MAX_DURATION_SECONDS)


DEFAULT_RETRY_POLICY = RetryPolicy()


class WaitingJobPolicy(enum.Enum):
    """What a schedule's trigger firing does while an earlier job of the schedule waits in
    PENDING_CONSTRAINT (seed 000's job queue: a notification joins the schedule's job unless that
    job is already PENDING_LAUNCH). Jobs a time trigger fired (with a logical time) never join:
    each stands for its own time."""

    JOIN = "JOIN"
    """The default: the fired job's notifications join the waiting job, whose one run gets them
    all; the fired job ends JOINED without a run. A job already PENDING_LAUNCH or LAUNCHED is
    never changed: a fire then waits as a job of its own (which later fires may join)."""
    SEPARATE = "SEPARATE"
    """Every fire is a job and a run of its own, with only its own notifications."""


class JobState(enum.Enum):
    PENDING_TRIGGER = "PENDING_TRIGGER"
    """Created by the first matching notification; the trigger is not satisfied yet."""
    PENDING_CONSTRAINT = "PENDING_CONSTRAINT"
    """The trigger fired; the job waits for its run constraints."""
    PENDING_LAUNCH = "PENDING_LAUNCH"
    """Admitted; the launcher has been asked to start the run."""
    LAUNCHED = "LAUNCHED"
    """The launcher recorded the run for this job."""
    DISCARDED = "DISCARDED"
    """Dropped, with a reason (schedule disabled, deleted or replaced, timeout, constraint never met)."""
    JOINED = "JOINED"
    """Its trigger fired while an earlier job of its schedule waited for its constraints: its
    notifications joined that job (WaitingJobPolicy.JOIN), whose run gets them; it has no run."""


@dataclass(frozen=True)
class TriggerContext:
    """Why a program runs: passed to it whole, not as a count (CDAP passed only the count)."""

    schedule_id: str
    schedule_name: str
    properties: Mapping[str, str] = field(default_factory=dict)
    notifications: tuple[Notification, ...] = ()
    logical_time: datetime | None = None

    def partitions(self) -> list[tuple[str, str, PartitionRef]]:
        """(namespace, dataset, partition) of every triggering partition, in arrival order."""
        return [
            (n.payload.namespace, n.payload.dataset, p)
            for n in self.notifications
            if isinstance(n.payload, PartitionCommitted)
            for p in n.payload.partitions
        ]


@dataclass(frozen=True)
class Job:
    id: str
    schedule_id: str
    schedule_generation: int
    program: ProgramRef
    context: TriggerContext
    created_at: datetime
    priority: int = 0
    constraints: tuple[Constraint, ...] = ()
    """The schedule's run constraints when its trigger fired: the checker admits by these."""
    timeout_seconds: int = 0
    timeout_policy: TimeoutPolicy = TimeoutPolicy.DISCARD
    sequence: int = 0
    """The job's number within its schedule (1, 2, ...), in the order the matcher triggered them."""
    triggered_at: datetime | None = None
    """When the trigger fired: delays and timeouts count from here."""
    retry_policy: RetryPolicy = DEFAULT_RETRY_POLICY
    """The schedule's, when its trigger fired: what the launcher does with a LOST or FAILED attempt."""
    waiting_job_policy: WaitingJobPolicy = WaitingJobPolicy.JOIN
    """The schedule's, when its trigger fired: whether this job may join an earlier one still waiting."""
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    """The schedule's Spark settings, when its trigger fired (the launcher checks them again)."""
    max_run_seconds: int = 0
    """The schedule's run time limit, when its trigger fired: the launcher kills a run going longer; 0: none."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "constraints", tuple(self.constraints))

    @property
    def joinable(self) -> bool:
        """Whether this job and an earlier waiting job of its schedule may become one run."""
        return self.waiting_job_policy is WaitingJobPolicy.JOIN and self.context.logical_time is None
