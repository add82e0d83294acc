"""Ids derived from what they identify."""
from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

from sluice.ids import derived_id, time_ordered_id, time_ordered_ids


def test_derived_ids_are_uuid5_of_the_parts():
    for parts in [("a",), ("job", "s1", "12"), ("run", "ünï")]:
        assert derived_id(*parts) == str(uuid.uuid5(uuid.NAMESPACE_URL, "sluice:" + "/".join(parts)))



def test_time_ordered_ids_sort_by_time_then_by_when_they_were_made():
    start = datetime(2026, 11, 26, tzinfo=timezone.utc)
    ids = [time_ordered_id(start + timedelta(milliseconds=ms), "matcher-s", str(ms)) for ms in (0, 1, 2, 999, 60_000)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(uuid.UUID(i).version == 7 and uuid.UUID(i).variant == uuid.RFC_4122 for i in ids)
    assert uuid.UUID(ids[0]).int >> 80 == int(start.timestamp() * 1000)


def test_ids_of_one_millisecond_sort_as_made_whichever_their_parts_and_maker():
    at = datetime(2026, 11, 26, 12, 30, tzinfo=timezone.utc)
    matcher, checker = time_ordered_ids(at), time_ordered_ids(at)
    made = [maker(f"stream-{n % 7}", str(n)) for n in range(5000) for maker in (matcher, checker)]
    assert made == sorted(made) and len(set(made)) == len(made)
    assert all(uuid.UUID(i).version == 7 and uuid.UUID(i).variant == uuid.RFC_4122 for i in made)


def test_processes_making_ids_in_the_same_millisecond_differ_by_their_parts():
    at = datetime(2026, 11, 26, tzinfo=timezone.utc)
    one = time_ordered_id(at + timedelta(hours=1), "a", "1")
    other = time_ordered_id(at + timedelta(hours=1, milliseconds=1), "a", "1")
    again = time_ordered_id(at + timedelta(hours=1), "b", "1")  # the same millisecond again: its counter restarts
    assert one[:23] == again[:23] and one != again and one < other
