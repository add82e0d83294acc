"""A schedule's alert policy: its SLA, its webhooks, what it alerts on; validated as hostile input."""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from datetime import datetime, time, timedelta
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sluice.domain.errors import InvalidArgument

MAX_WEBHOOKS = 5
MAX_URL_LENGTH = 2048
MAX_WITHIN_MINUTES = 7 * 24 * 60
_TIME_OF_DAY = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])")
_UNSAFE_URL_CHARACTERS = re.compile(r"[\x00-\x20\x7f\\]")
_SCHEDULE_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
"""Schedule ids are derived UUIDs (sluice.domain.schedules.schedule_id_for); a name's characters, digits first too."""


class AlertOn(enum.Enum):
    FAILURE = "FAILURE"
    """A run of the schedule ended FAILED or LOST (KILLED is an operator's doing: no alert)."""
    SLA_MISS = "SLA_MISS"
    """The SLA's deadline passed without a COMPLETED run that meets it."""


@dataclass(frozen=True)
class CompleteBy:
    """A COMPLETED run each local day, ending on that day no later than `time_of_day` (HH:MM) in `zone`."""
    time_of_day: str
    zone: str


@dataclass(frozen=True)
class CompleteWithin:
    """A COMPLETED run of each job within `minutes` of the job's trigger."""
    minutes: int


@dataclass(frozen=True)
class AlertPolicy:
    schedule_id: str
    sla: CompleteBy | CompleteWithin | None
    webhooks: tuple[str, ...]
    on: tuple[AlertOn, ...] = (AlertOn.FAILURE, AlertOn.SLA_MISS)

    def alerts_on(self, kind: AlertOn) -> bool:
        return kind in self.on


def validate_policy(policy: AlertPolicy, path: str = "policy") -> AlertPolicy:
    """The policy, or InvalidArgument naming the offending field. A webhook URL is never echoed:
    it may hold a secret (Slack's do, in the path)."""
    validate_schedule_id(policy.schedule_id, f"{path}.schedule_id")
    match policy.sla:
        case CompleteBy(time_of_day, zone):
            if not isinstance(time_of_day, str) or not _TIME_OF_DAY.fullmatch(time_of_day):
                raise InvalidArgument(f"{path}.sla.complete_by.time_of_day", "must be HH:MM (00:00 to 23:59)")
            zone_info(zone, f"{path}.sla.complete_by.zone")
        case CompleteWithin(minutes):
            if not isinstance(minutes, int) or not 1 <= minutes <= MAX_WITHIN_MINUTES:
                raise InvalidArgument(f"{path}.sla.within_minutes", f"must be 1 to {MAX_WITHIN_MINUTES}")
    if not policy.webhooks:
        raise InvalidArgument(f"{path}.webhooks", "at least one webhook URL is required")
    if len(policy.webhooks) > MAX_WEBHOOKS:
        raise InvalidArgument(f"{path}.webhooks", f"at most {MAX_WEBHOOKS} webhooks, got {len(policy.webhooks)}")
    if len(set(policy.webhooks)) != len(policy.webhooks):
        raise InvalidArgument(f"{path}.webhooks", "a URL is given twice")
    for index, url in enumerate(policy.webhooks):
        validate_webhook_url(url, f"{path}.webhooks[{index}]")
    if not policy.on:
        raise InvalidArgument(f"{path}.on", "must name failure, sla_miss or both")
    if policy.on == (AlertOn.SLA_MISS,) and policy.sla is None:
        raise InvalidArgument(f"{path}.sla", "alerting on SLA misses only needs an SLA")
    return policy


def validate_schedule_id(schedule_id: str, path: str) -> str:
    if not isinstance(schedule_id, str) or not schedule_id:
        raise InvalidArgument(path, "must not be empty")
    if not _SCHEDULE_ID.fullmatch(schedule_id):
        raise InvalidArgument(path, "must be a schedule id (letters, digits, _ and -, at most 128)")
    return schedule_id


def validate_webhook_url(url: str, path: str) -> str:
    if not isinstance(url, str) or not url:
        raise InvalidArgument(path, "must not be empty")
    if len(url) > MAX_URL_LENGTH:
        raise InvalidArgument(path, f"at most {MAX_URL_LENGTH} characters, got {len(url)}")
    if _UNSAFE_URL_CHARACTERS.search(url):
        raise InvalidArgument(path, "must not contain spaces, control characters or backslashes")
    if not url.isascii():
        raise InvalidArgument(path, "must be ASCII (a host in punycode, a path percent-encoded)")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError on a port that is not a number in range)
    except ValueError:
        raise InvalidArgument(path, "is not a valid URL") from None
    if parts.scheme not in ("http", "https"):
        raise InvalidArgument(path, "must be an http:// or https:// URL")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise InvalidArgument(path, "must not carry credentials (user:password@); put a token in the path instead")
    if not parts.hostname:
        raise InvalidArgument(path, "must name a host")
    if parts.fragment:
        raise InvalidArgument(path, "must not have a #fragment")
    return url


def redacted(url: str) -> str:
    """A webhook URL as logs and answers show it: scheme and host only (its path may be a secret)."""
    parts = urlsplit(url)
    hidden = "/…" if parts.path not in ("", "/") or parts.query else ""
    return f"{parts.scheme}://{parts.netloc}{hidden}"


def zone_info(zone: str, path: str) -> ZoneInfo:
    if not isinstance(zone, str) or not zone or len(zone) > 64 or ".." in zone or zone.startswith("/"):
        raise InvalidArgument(path, "must be an IANA time zone such as Europe/Berlin")
    try:
        return ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidArgument(path, f"unknown time zone {zone[:64]!r}") from None


def next_deadline(sla: CompleteBy, after: datetime) -> datetime:
    """The first deadline of a complete-by SLA strictly after `after`, in UTC (a time of day that a DST
    change skips counts at the same wall time read with the offset before the change)."""
    zone = ZoneInfo(sla.zone)
    hours, minutes = (int(part) for part in sla.time_of_day.split(":"))
    day = after.astimezone(zone).date()
    for offset in range(3):
        candidate = datetime.combine(day + timedelta(days=offset), time(hours, minutes), tzinfo=zone)
        if candidate > after:
            return candidate.astimezone(after.tzinfo)
    raise AssertionError("a time of day recurs within three days")


def meets_deadline(sla: CompleteBy, completed_at: datetime, deadline: datetime) -> bool:
    """A run completed at `completed_at` meets `deadline` if it ended on the deadline's local day, not after it."""
    zone = ZoneInfo(sla.zone)
    return completed_at <= deadline and completed_at.astimezone(zone).date() == deadline.astimezone(zone).date()
