"""Commands that more than one aggregate takes, defined once: the matcher's and the checker's
aggregates both follow the schedules and both re-check on the clock."""
from __future__ import annotations

from dataclasses import dataclass

from sluice.domain.schedules import Schedule


@dataclass(frozen=True)
class ObserveSchedule:
    """A schedule changed (from the schedules topic)."""

    schedule_id: str
    schedule: Schedule | None
    """None: deleted."""


@dataclass(frozen=True)
class CheckTime:
    """The clock reached a time at which an answer may change: a pending job's wake-up time (cron
    fire, quiet period, elapsed time) in the matcher, a waiting job's next check in the checker."""
