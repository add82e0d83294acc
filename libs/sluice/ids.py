"""Ids are derived from what they identify, so a replayed log produces the same ids."""
from __future__ import annotations

import hashlib
import itertools
import re
import uuid
from datetime import datetime
from typing import Callable, Iterator


_NAMESPACE_PREFIX = uuid.NAMESPACE_URL.bytes + b"sluice:"
_sha1 = hashlib.sha1

UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
"""Every id Sluice makes has this shape (`fullmatch` it); lineage's run ids must have it too."""


def derived_id(*parts: str) -> str:
    """A stable id derived from other ids: the same inputs always give the same id (idempotent retries).

    It is uuid5(NAMESPACE_URL, "sluice:" + "/".join(parts)), computed without building UUID objects:
    every fire derives its next job's."""
    x = _sha1(_NAMESPACE_PREFIX + "/".join(parts).encode()).hexdigest()
    # the version (5) in the third group's first digit, RFC 9562's variant in the fourth's
    return f"{x[:8]}-{x[8:12]}-5{x[13:16]}-{_VARIANT[x[16]]}{x[17:20]}-{x[20:32]}"


_VARIANT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}
"""RFC 9562's variant bits (10xx) in the fourth group's first hex digit."""


def time_ordered_id(at: datetime, *parts: str) -> str:
    """A UUIDv7 (RFC 9562): the milliseconds of `at` (an aware datetime), a 24-bit counter of the ids
    this process made in that millisecond (RFC 9562's method 1, as Python 3.14's uuid7), then 48 bits
    of the parts' digest. Ids sort in the order they were made: an index of them grows at its right
    edge, where ids random within one millisecond (a burst under a clock that stands still: a simulated
    one) landed on random pages. The digest keeps another process's ids apart. Not reproducible: only
    for ids whose duplicates something else already refuses (an event appended at an expected version)."""
    return time_ordered_ids(at)(*parts)


def time_ordered_ids(at: datetime) -> Callable[..., str]:
    """`time_ordered_id` for many ids of one time: the time's part is worked out once."""
    millisecond = int(at.timestamp() * 1000) & 0xFFFF_FFFF_FFFF
    x = f"{millisecond:012x}"
    prefix = f"{x[:8]}-{x[8:]}-7"
    counter = _counter_of(millisecond)
    sha1 = hashlib.sha1

    def of(*parts: str) -> str:
        made = f"{next(counter) & 0xFF_FFFF:06x}"
        digest = sha1(("sluice:" + "/".join(parts)).encode()).hexdigest()
        return f"{prefix}{made[:3]}-8{made[3:]}-{digest[:12]}"  # 8: RFC 9562's variant (10), then 00
    return of


_last_counter: tuple[int, Iterator[int]] = (-1, itertools.count())
"""(millisecond, the counter of its ids): one reference, read and replaced whole (threads)."""


def _counter_of(millisecond: int) -> Iterator[int]:
    global _last_counter
    last = _last_counter
    if last[0] != millisecond:
        last = _last_counter = (millisecond, itertools.count())
    return last[1]


def run_id_for(job_id: str) -> str:
    """One run per job: a redelivered launch request maps to the same run and is ignored."""
    return derived_id("run", job_id)

