"""Ids are derived from what they identify, so a replayed log produces the same ids."""
from __future__ import annotations

import hashlib
import re
import uuid
from datetime import datetime
from typing import Callable


_NAMESPACE_PREFIX = uuid.NAMESPACE_URL.bytes + b"sluice:"
_sha1 = hashlib.sha1

UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
"""Every id Sluice makes has this shape (`fullmatch` it); lineage's run ids must have it too."""


def derived_id(*parts: str) -> str:
    """A stable id derived from other ids: the same inputs always give the same id (idempotent retries).

    It is uuid5(NAMESPACE_URL, "sluice:" + "/".join(parts)), computed without building UUID objects:
    every append derives one per event."""
    x = _sha1(_NAMESPACE_PREFIX + "/".join(parts).encode()).hexdigest()
    # the version (5) in the third group's first digit, RFC 9562's variant in the fourth's
    return f"{x[:8]}-{x[8:12]}-5{x[13:16]}-{_VARIANT[x[16]]}{x[17:20]}-{x[20:32]}"


def time_ordered_id(at: datetime, *parts: str) -> str:
    """A UUIDv7-style id: the milliseconds of `at` (an aware datetime) first, then 74 bits of the
    parts' digest. The same (at, parts) give the same id; ids of later times sort after earlier
    ones, so an index of them grows at its right edge instead of on random pages. Only for ids
    whose duplicates something else already refuses (an event appended at an expected version):
    a retry decided at another time gets another id."""
    return time_ordered_ids(at)(*parts)


def time_ordered_ids(at: datetime) -> Callable[..., str]:
    """`time_ordered_id` for many ids of one time: the time's part is worked out once."""
    x = f"{int(at.timestamp() * 1000) & 0xFFFF_FFFF_FFFF:012x}"
    prefix = f"{x[:8]}-{x[8:]}-7"
    sha1 = hashlib.sha1

    def of(*parts: str) -> str:
        digest = sha1(("sluice:" + "/".join(parts)).encode()).hexdigest()
        return f"{prefix}{digest[:3]}-{_VARIANT[digest[3]]}{digest[4:7]}-{digest[7:19]}"
    return of


_VARIANT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}
"""RFC 9562's variant bits (10xx) in the fourth group's first hex digit."""


def run_id_for(job_id: str) -> str:
    """One run per job: a redelivered launch request maps to the same run and is ignored."""
    return derived_id("run", job_id)
