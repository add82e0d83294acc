"""Cron fire times in an explicit zone, DST-correct, computed without ever reading the clock.

croniter only enumerates *wall-clock* times (naive datetimes, plain calendar arithmetic, so
neither DST nor the server's zone can leak in); this module maps each wall-clock time to one
UTC instant itself. croniter's own zone-aware mode is not used: croniter 5.0.1 returns the
wrong instant on the day after a fall-back (01:30 America/New_York on 2026-11-02 as 07:30Z,
not 06:30Z).

DST policy (one fire per wall-clock time named by the cron expression):
- skipped by spring-forward (02:30 on 2026-03-08 in New York): fires once, at the first valid
  instant after the gap (03:00 EDT = 07:00Z); fires that land on the same instant merge, so an
  hourly cron fires 23 times that day and never loses its slot;
- repeated by fall-back (01:30 on 2026-11-01 in New York): fires once, at the first occurrence
  (01:30 EDT = 05:30Z), so an hourly cron fires 24 times on that 25-hour day.
Whoever wants every elapsed hour regardless of DST writes the cron in UTC.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from sluice.domain.triggers.specs import TimeTrigger, Trigger, leaves, require_aware

NOT_ZONES = frozenset({"localtime", "posixrules", "Factory"})
"""Keys ZoneInfo may resolve that are not real IANA zones (`localtime` is the server's zone)."""

_SEARCH_LIMIT = 100_000
"""More wall-clock times than any real cron yields inside a repeated hour (3600 per second)."""


class CronError(ValueError):
    """A cron expression or zone that cannot be used; the message says why."""


def zone_of(name: str) -> ZoneInfo:
    if not isinstance(name, str) or not name or name in NOT_ZONES:
        raise CronError(_unknown_zone(name))
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as error:
        raise CronError(_unknown_zone(name)) from error
    except OSError:
        # A directory of the database ("Europe") or a name too long for a file: the name's fault. Not chained:
        # an OSError cause reads as infrastructure (sluice.runtime.errors), retried for ever on the bus.
        raise CronError(_unknown_zone(name)) from None


def _unknown_zone(name: object) -> str:
    shown = name if not isinstance(name, str) or len(name) <= 64 else f"{name[:64]}..."
    return f"unknown time zone {shown!r} (an IANA name such as 'America/New_York' is required)"


def check_cron(expression: str) -> None:
    """Raise CronError unless the expression has 5 fields (or 6, seconds first) and ever fires."""
    fields = expression.split() if isinstance(expression, str) else []
    if len(fields) not in (5, 6):
        raise CronError(f"a cron expression has 5 fields (minute hour day month weekday), or 6 with "
                        f"seconds first; got {expression!r}")
    try:
        _wall_times(expression, datetime(2000, 1, 1)).get_next(datetime)
    except (ValueError, KeyError, TypeError, IndexError) as error:  # croniter's errors are ValueErrors
        raise CronError(f"invalid cron expression {expression!r}: {error}") from error


def next_fire(trigger: TimeTrigger, after: datetime) -> datetime:
    """The first fire strictly after `after`, in UTC."""
    require_aware(after)
    return _next_fire(trigger.cron, trigger.zone, after.astimezone(timezone.utc))


def next_fire_times(trigger: TimeTrigger, after: datetime, until: datetime) -> list[datetime]:
    """Every fire in (after, until], in UTC and in order: what a misfire policy catches up."""
    require_aware(until)
    fires = []
    fire = next_fire(trigger, after)
    while fire <= until:
        fires.append(fire)
        fire = _next_fire(trigger.cron, trigger.zone, fire)
    return fires


def latest_fire(trigger: Trigger, after: datetime, until: datetime) -> datetime | None:
    """The latest fire of any time leaf of `trigger` in (after, until], None when there is none.
    Computed back from `until`, not enumerated from `after`: a year of a per-second cron is instant."""
    return nth_latest_fire(trigger, after, until, 1)


def nth_latest_fire(trigger: Trigger, after: datetime, until: datetime, n: int) -> datetime | None:
    """The latest of each time leaf's n-th latest fire in (after, until] (None when no leaf has n):
    fires after it are at most n - 1 per leaf. Costs n steps back per leaf, never the whole span."""
    require_aware(after)
    require_aware(until)
    fires = [fire for leaf in leaves(trigger) if isinstance(leaf, TimeTrigger)
             if (fire := _nth_latest(leaf, after.astimezone(timezone.utc), until.astimezone(timezone.utc), n))]
    return max(fires, default=None)


def _nth_latest(trigger: TimeTrigger, after: datetime, until: datetime, n: int) -> datetime | None:
    zone = zone_of(trigger.zone)
    latest = _latest_at_or_before(trigger, zone, until)
    if latest is None or latest <= after:
        return None
    if n == 1:
        return latest
    walls = _wall_times(trigger.cron, latest.astimezone(zone).replace(tzinfo=None))
    fire, found = latest, 1
    for _ in range(_SEARCH_LIMIT + n):
        previous = to_instant(walls.get_prev(datetime), zone)
        if previous >= fire:  # a repeated hour's second pass, or merged into a gap's end
            continue
        if previous <= after:
            return None
        fire, found = previous, found + 1
        if found == n:
            return fire
    raise CronError(f"{trigger.cron!r} in {trigger.zone}: no {n}th fire before {until.isoformat()} found")


def _latest_at_or_before(trigger: TimeTrigger, zone: ZoneInfo, until: datetime) -> datetime | None:
    """The last fire at or before `until`: croniter steps back from `until`'s wall time, then fires
    hidden by a repeated hour (a first pass's wall time later than `until`'s) are walked forward."""
    start = until.replace(microsecond=0) + timedelta(seconds=1)
    walls = _wall_times(trigger.cron, start.astimezone(zone).replace(tzinfo=None))
    candidate = None
    for _ in range(_SEARCH_LIMIT):
        try:
            fire = to_instant(walls.get_prev(datetime), zone)
        except (ValueError, OverflowError):  # before year 1: no fire
            return None
        if fire <= until:
            candidate = fire
            break
    if candidate is None:
        return None
    for _ in range(_SEARCH_LIMIT):
        following = _next_fire(trigger.cron, trigger.zone, candidate)
        if following > until:
            return candidate
        candidate = following
    return candidate


@lru_cache(maxsize=4096)
def _next_fire(expression: str, zone_name: str, after: datetime) -> datetime:
    zone = zone_of(zone_name)
    # Cron resolution is a second: the next fire after `after` is the next after its whole second.
    after = after.replace(microsecond=0)
    local = after.astimezone(zone)
    walls = _wall_times(expression, local.replace(tzinfo=None))
    for _ in range(_SEARCH_LIMIT):
        # Wall times map to instants monotonically (never backwards); only those inside a
        # repeated hour's second pass, or merged into a gap's end, can land at or before `after`.
        fire = to_instant(walls.get_next(datetime), zone)
        if fire > after:
            return fire
    raise CronError(f"{expression!r} in {zone_name} does not fire after {after.isoformat()}")


def _wall_times(expression: str, start: datetime) -> croniter:
    seconds_first = len(expression.split()) == 6
    return croniter(expression, start, second_at_beginning=seconds_first)


def to_instant(wall: datetime, zone: ZoneInfo) -> datetime:
    """The UTC instant a naive wall-clock time names in `zone`, by the DST policy above."""
    first = wall.replace(tzinfo=zone, fold=0).astimezone(timezone.utc)
    if first.astimezone(zone).replace(tzinfo=None) == wall:
        return first  # exists; when repeated, fold=0 is its first occurrence
    # Skipped by a gap. fold=1 reads it with the offset after the transition (an instant before
    # the transition), fold=0 with the offset before it (after the transition).
    before = wall.replace(tzinfo=zone, fold=1).astimezone(timezone.utc)
    return _transition(before, first, zone)


def _transition(before: datetime, after: datetime, zone: ZoneInfo) -> datetime:
    """The first whole second in (before, after] whose offset is the one at `after`."""
    target = after.astimezone(zone).utcoffset()
    low, high = int(before.timestamp()), int(after.timestamp())
    while high - low > 1:
        middle = (low + high) // 2
        if datetime.fromtimestamp(middle, zone).utcoffset() == target:
            high = middle
        else:
            low = middle
    return datetime.fromtimestamp(high, timezone.utc)
