"""Run constraints: what must hold before a triggered job may launch, as frozen, JSON-friendly data.

The codec (`sluice.eventlog.codec`) decodes a union of dataclasses by the set of its field names,
so every kind has its own set (a delay says `seconds`, a minimum interval says `min_seconds`; a
time window says `start`/`end`, a runs-per-window cap says `max_runs`/`unit`). There is no `kind`
field, for the reason the trigger specs give: a tag could disagree with its class.

Defaults: every constraint WAITs when not met (`on_not_met=NotMetPolicy.WAIT`); zones default to
UTC (always explicit, never the server's); a concurrency constraint with no `group` limits the
schedule's own program; a runs-per-window cap counts per calendar day.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass


class NotMetPolicy(enum.Enum):
    """What a constraint that is not met does to the job (CDAP's `waitUntilMet` / `abortIfNotMet`)."""

    WAIT = "WAIT"
    """The default: the job stays pending until the constraint is met (or the job times out)."""
    ABORT = "ABORT"
    """The job is discarded if the constraint is not met at the job's first check. A job that passed
    its first check (and waits for another constraint) is not discarded later by this one: from
    then on it waits for it like WAIT."""


class TimeoutPolicy(enum.Enum):
    """What happens to a job still pending `timeout_seconds` after its trigger fired."""

    DISCARD = "DISCARD"
    """The default: the job is discarded, with the constraints it was still waiting for as reason."""
    FORCE_LAUNCH = "FORCE_LAUNCH"
    """The job launches although its timing constraints (delay, time window, minimum interval,
    runs per window) and the soft load limit are not met. Concurrency constraints and the hard
    load limit still hold: a forced job waits for a free slot, then launches ahead of nothing
    but higher-priority jobs."""


@dataclass(frozen=True)
class ConcurrencyConstraint:
    """At most `max_running` runs at once: of this schedule's program when `group` is "", else of
    all programs in `group` (every program whose schedules name the group, across schedules).
    A job admitted by the checker counts as running from the instant it is admitted."""

    max_running: int = 1
    group: str = ""
    on_not_met: NotMetPolicy = NotMetPolicy.WAIT


@dataclass(frozen=True)
class DelayConstraint:
    """Launch no earlier than `seconds` after the trigger fired (e.g. let late chunks land)."""

    seconds: int
    on_not_met: NotMetPolicy = NotMetPolicy.WAIT


@dataclass(frozen=True)
class TimeWindowConstraint:
    """Launch only while the wall clock of `zone` shows a time in [start, end) ("HH:MM" each).

    When end < start the window wraps midnight (22:00-06:00 is open from 22:00 until 06:00 the next
    morning). The clock is read in local wall time, so DST needs no special case: on a
    spring-forward day a window over the skipped hour is open only for the part of it that exists
    (01:30-02:30 in New York on 2026-03-08 is open 01:30-02:00 EST); on a fall-back day it is open
    whenever the clock shows a time inside it, for both passes of the repeated hour
    (01:30-02:30 on 2026-11-01 is open 01:30-02:00 EDT, closed 01:00-01:30 EST, open 01:30-02:30 EST)."""

    start: str
    end: str
    zone: str = "UTC"
    on_not_met: NotMetPolicy = NotMetPolicy.WAIT


@dataclass(frozen=True)
class MinSinceLastRunConstraint:
    """Launch only when at least `min_seconds` have passed since the program's last run *started*
    (whatever its outcome, and whoever launched it).

    Started, not ended: the start is known the instant the checker admits a job (it reserves the
    run then), so the next possible launch is an exact instant computed from the checker's own
    state, two jobs in one admission pass cannot both pass, and the interval spaces launches
    regardless of run length. An end-based rule would leave "since" undefined while a run is
    going, overlap with the concurrency constraint, and let a long run push the cadence out.
    Failed runs count too, so a failing program is not relaunched in a tight loop.
    (CDAP's LastRunConstraint measured from the end of the last successful run and polled.)"""

    min_seconds: int
    on_not_met: NotMetPolicy = NotMetPolicy.WAIT


UNITS = ("hour", "day")
"""The windows a runs-per-window cap counts in: clock hours or calendar days of its zone."""


@dataclass(frozen=True)
class MaxRunsPerWindowConstraint:
    """At most `max_runs` run starts of the program per clock hour or calendar day ("hour" | "day")
    of `zone`. Days are local calendar days, so a DST day has 23 or 25 hours; a night window
    (22:00-06:00) spans two days, so "once per night" also needs a MinSinceLastRunConstraint
    longer than the window (see the user story 7 test)."""

    max_runs: int
    unit: str = "day"
    zone: str = "UTC"
    on_not_met: NotMetPolicy = NotMetPolicy.WAIT


Constraint = (ConcurrencyConstraint | DelayConstraint | TimeWindowConstraint | MinSinceLastRunConstraint
              | MaxRunsPerWindowConstraint)

KINDS: dict[type, str] = {
    ConcurrencyConstraint: "concurrency",
    DelayConstraint: "delay",
    TimeWindowConstraint: "time_window",
    MinSinceLastRunConstraint: "min_since_last_run",
    MaxRunsPerWindowConstraint: "max_runs_per_window",
}
"""Each kind's name in field paths ("schedule.constraints[0].time_window.start") and on the wire."""
