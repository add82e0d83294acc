"""Local wall-clock arithmetic for time windows and per-hour/per-day caps, DST-correct and pure.

Every function takes aware instants and returns aware UTC instants; the zone is always explicit.
"""
from __future__ import annotations

import re
from datetime import datetime, time, timedelta, timezone
from functools import lru_cache
from zoneinfo import ZoneInfo

from sluice.domain.triggers.cron import to_instant

HH_MM = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])")
"""A wall-clock time of day, "00:00" to "23:59"."""

_SEARCH_DAYS = 8
"""How many local days ahead a window's opening is sought: more than any zone ever skips."""


def parse_hh_mm(text: str) -> time:
    match = HH_MM.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"HH:MM expected, got {text!r}")
    return time(int(match.group(1)), int(match.group(2)))


def in_window(instant: datetime, start: time, end: time, zone: ZoneInfo) -> bool:
    """Whether the zone's wall clock shows a time in [start, end) at `instant` (wrapping midnight
    when end < start)."""
    wall = instant.astimezone(zone).time().replace(tzinfo=None)
    if start < end:
        return start <= wall < end
    return wall >= start or wall < end


@lru_cache(maxsize=4096)
def next_opening(now: datetime, start: time, end: time, zone: ZoneInfo) -> datetime:
    """The first instant after `now` at which the window is open (call it while it is closed).

    The window can only open where the wall clock reaches `start` (each pass of a repeated time
    counts) or where the offset jumps (a gap or a repeated hour can move the clock into the
    window), so those candidates are tried in order, a day at a time. Cached: in one admission
    pass every job shares `now`, and many share a window."""
    today = now.astimezone(zone).date()
    starts = [instant for days in range(-1, _SEARCH_DAYS + 1)
              for instant in occurrences(datetime.combine(today + timedelta(days=days), start), zone)]
    low = now
    for _ in range(_SEARCH_DAYS):
        high = low + timedelta(days=1)
        candidates = sorted({s for s in starts if low < s <= high} | set(offset_changes(low, high, zone)))
        for candidate in candidates:
            if in_window(candidate, start, end, zone):
                return candidate
        low = high
    raise ValueError(f"the window {start}-{end} in {zone.key} does not open within {_SEARCH_DAYS} days")


def occurrences(wall: datetime, zone: ZoneInfo) -> list[datetime]:
    """Every UTC instant at which the zone's clock shows the naive `wall` time: one, two in a
    repeated hour, none in a gap."""
    found = []
    for fold in (0, 1):
        instant = wall.replace(tzinfo=zone, fold=fold).astimezone(timezone.utc)
        if instant.astimezone(zone).replace(tzinfo=None) == wall and instant not in found:
            found.append(instant)
    return found


def offset_changes(after: datetime, until: datetime, zone: ZoneInfo) -> list[datetime]:
    """The instants in (after, until] at which the zone's UTC offset changes, to the second.
    Zones change offset at most every few weeks and never twice within six hours."""
    step = timedelta(hours=6)
    found, low = [], after.astimezone(timezone.utc)
    while low < until:
        high = min(low + step, until)
        if low.astimezone(zone).utcoffset() != high.astimezone(zone).utcoffset():
            found.append(_first_with_offset_of(low, high, zone))
        low = high
    return found


def _first_with_offset_of(low: datetime, high: datetime, zone: ZoneInfo) -> datetime:
    """The first whole second in (low, high] that has the offset in force at `high`."""
    target = high.astimezone(zone).utcoffset()
    lo, hi = int(low.timestamp()), int(high.timestamp())
    while hi - lo > 1:
        middle = (lo + hi) // 2
        if datetime.fromtimestamp(middle, zone).utcoffset() == target:
            hi = middle
        else:
            lo = middle
    return datetime.fromtimestamp(hi, timezone.utc)


def window_bounds(now: datetime, unit: str, zone: ZoneInfo) -> tuple[datetime, datetime]:
    """The clock hour or calendar day of `zone` containing `now`, as [start, end) in UTC.

    A day runs from one local midnight to the next (23 or 25 hours across DST; where midnight is
    skipped, from the first instant after the gap). An hour runs from the instant the clock last
    showed minute 0 in `now`'s pass of that hour (the second pass of a repeated hour is an
    hour of its own), for one hour."""
    local = now.astimezone(zone)
    if unit == "day":
        midnight = datetime.combine(local.date(), time())
        return to_instant(midnight, zone), to_instant(midnight + timedelta(days=1), zone)
    if unit == "hour":
        start = local.replace(minute=0, second=0, microsecond=0).astimezone(timezone.utc)
        return start, start + timedelta(hours=1)
    raise ValueError(f"unknown unit {unit!r} (one of: hour, day)")
