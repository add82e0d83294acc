"""Ids derived from what they identify."""
from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

from sluice.ids import derived_id, time_ordered_id, time_ordered_ids


def test_derived_ids_are_uuid5_of_the_parts():
    for parts in [("a",), ("job", "s1", "12"), ("run", "ünï")]:
        assert derived_id(*parts) == str(uuid.uuid5(uuid.NAMESPACE_URL, "sluice:" + "/".join(parts)))



def test_time_ordered_ids_sort_by_time_and_are_the_same_for_the_same_inputs():
    start = datetime(2026, 11, 26, tzinfo=timezone.utc)
    ids = [time_ordered_id(start + timedelta(milliseconds=ms), "matcher-s", str(ms)) for ms in (0, 1, 2, 999, 60_000)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(uuid.UUID(i).version == 7 and uuid.UUID(i).variant == uuid.RFC_4122 for i in ids)
    assert time_ordered_id(start, "matcher-s", "0") == ids[0]
    assert uuid.UUID(ids[0]).int >> 80 == int(start.timestamp() * 1000)


def test_time_ordered_ids_of_one_time_differ_by_their_parts():
    of = time_ordered_ids(datetime(2026, 11, 26, tzinfo=timezone.utc))
    assert len({of("matcher-s", str(version)) for version in range(1000)}) == 1000
    assert of("a", "b") == time_ordered_id(datetime(2026, 11, 26, tzinfo=timezone.utc), "a", "b")
