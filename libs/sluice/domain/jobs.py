"""Jobs: one activation of a schedule, and the trigger context handed to its program."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Mapping

from sluice.domain.common import Notification, PartitionCommitted, PartitionRef, ProgramRef
from sluice.domain.constraints.specs import Constraint, TimeoutPolicy


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

    def __post_init__(self) -> None:
        object.__setattr__(self, "constraints", tuple(self.constraints))
