"""Reject a bad run constraint with the exact path of the offending field."""
from __future__ import annotations

from typing import Iterable

from sluice.domain import bounds
from sluice.domain.constraints.clock import parse_hh_mm
from sluice.domain.constraints.specs import (
    KINDS,
    UNITS,
    ConcurrencyConstraint,
    DelayConstraint,
    MaxRunsPerWindowConstraint,
    MinSinceLastRunConstraint,
    NotMetPolicy,
    TimeWindowConstraint,
)
from sluice.domain.triggers.cron import CronError, zone_of
from sluice.domain.errors import InvalidArgument


def validate_constraints(constraints: Iterable[object], path: str = "schedule.constraints") -> None:
    """Validate each constraint as `path[index]`."""
    for index, constraint in enumerate(constraints):
        validate_constraint(constraint, f"{path}[{index}]")


def validate_constraint(constraint: object, path: str = "schedule.constraints[0]") -> None:
    """Raise InvalidArgument naming the field, e.g. "schedule.constraints[0].time_window.start"."""
    kind = KINDS.get(type(constraint))
    if kind is None:
        raise InvalidArgument(path, f"unknown constraint type {type(constraint).__name__} "
                                    f"(one of: {', '.join(KINDS.values())})")
    here = f"{path}.{kind}"
    match constraint:
        case ConcurrencyConstraint(max_running, group):
            bounds.check_int(f"{here}.max_running", max_running, 1, bounds.MAX_COUNT)
            if not isinstance(group, str) or any(c.isspace() for c in group):
                raise InvalidArgument(f"{here}.group", f"must be a name without white space, got {group!r}")
            bounds.check_text(f"{here}.group", group, bounds.MAX_KEY_VALUE_BYTES)
        case DelayConstraint(seconds):
            bounds.check_seconds(f"{here}.seconds", seconds, 0)
        case TimeWindowConstraint(start, end, zone):
            _hh_mm(f"{here}.start", start)
            _hh_mm(f"{here}.end", end)
            if start == end:
                raise InvalidArgument(f"{here}.end", f"must differ from start ({start}): the window would be empty")
            _zone(f"{here}.zone", zone)
        case MinSinceLastRunConstraint(min_seconds):
            bounds.check_seconds(f"{here}.min_seconds", min_seconds, 1)
        case MaxRunsPerWindowConstraint(max_runs, unit, zone):
            bounds.check_int(f"{here}.max_runs", max_runs, 1, bounds.MAX_COUNT)
            if unit not in UNITS:
                raise InvalidArgument(f"{here}.unit", f"must be one of {', '.join(UNITS)}, got {unit!r}")
            _zone(f"{here}.zone", zone)
    if not isinstance(constraint.on_not_met, NotMetPolicy):
        raise InvalidArgument(f"{here}.on_not_met", f"must be one of {', '.join(p.value for p in NotMetPolicy)}, "
                                                    f"got {constraint.on_not_met!r}")


def _hh_mm(path: str, value: object) -> None:
    try:
        parse_hh_mm(value)
    except ValueError:
        raise InvalidArgument(path, f"HH:MM expected (00:00 to 23:59), got {value!r}") from None


def _zone(path: str, value: object) -> None:
    try:
        zone_of(value)
    except CronError as error:
        raise InvalidArgument(path, str(error)) from None
