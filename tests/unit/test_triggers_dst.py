"""Time: cron fire instants across DST transitions (exact UTC instants), time leaves, logical
time of composites, and the exactness of wake_at.

DST policy: a wall-clock time skipped by spring-forward fires once, at the first valid instant after
the gap; a wall-clock time repeated by fall-back fires once, at its first occurrence."""
from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.domain.triggers import (
    AndTrigger,
    ElapsedTrigger,
    Evaluation,
    OrTrigger,
    PartitionTrigger,
    QuietPeriodTrigger,
    TimeTrigger,
    evaluate,
    next_fire,
    next_fire_times,
    observe,
    start,
)
from tests.unit.test_triggers import LEAF_TRIGGERS, NOTIFICATIONS, T0, at, feed, parts

NEW_YORK, LONDON, TOKYO = "America/New_York", "Europe/London", "Asia/Tokyo"


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=timezone.utc)


def fires(cron: str, zone: str, after: datetime, until: datetime) -> list[datetime]:
    return next_fire_times(TimeTrigger(cron, zone), after, until)


# America/New_York, 2026-03-08: 02:00 EST jumps to 03:00 EDT (07:00Z); 02:00-03:00 does not exist.
def test_new_york_spring_forward_daily_0230_fires_at_the_end_of_the_gap():
    assert fires("30 2 * * *", NEW_YORK, utc(2026, 3, 6, 12), utc(2026, 3, 10, 12)) == [
        utc(2026, 3, 7, 7, 30),  # 02:30 EST
        utc(2026, 3, 8, 7, 0),   # 02:30 does not exist: 03:00 EDT, the first valid instant after the gap
        utc(2026, 3, 9, 6, 30),  # 02:30 EDT
        utc(2026, 3, 10, 6, 30),
    ]


def test_new_york_spring_forward_hourly_fires_every_real_hour_once():
    assert fires("0 * * * *", NEW_YORK, utc(2026, 3, 8, 4, 30), utc(2026, 3, 8, 9, 0)) == [
        utc(2026, 3, 8, 5), utc(2026, 3, 8, 6),  # 00:00, 01:00 EST
        utc(2026, 3, 8, 7),                      # 02:00 (skipped) and 03:00 EDT merge: one fire
        utc(2026, 3, 8, 8), utc(2026, 3, 8, 9),  # 04:00, 05:00 EDT
    ]
    day = fires("0 * * * *", NEW_YORK, utc(2026, 3, 8, 4, 59), utc(2026, 3, 9, 3, 59))
    assert len(day) == 23  # a 23-hour local day


def test_new_york_spring_forward_half_hourly_keeps_the_skipped_slot():
    assert fires("30 * * * *", NEW_YORK, utc(2026, 3, 8, 6), utc(2026, 3, 8, 8)) == [
        utc(2026, 3, 8, 6, 30),  # 01:30 EST
        utc(2026, 3, 8, 7, 0),   # 02:30 skipped: 03:00 EDT
        utc(2026, 3, 8, 7, 30),  # 03:30 EDT
    ]


# America/New_York, 2026-11-01: 02:00 EDT falls back to 01:00 EST (06:00Z); 01:00-02:00 happens twice.
def test_new_york_fall_back_daily_0230_is_unaffected():
    assert fires("30 2 * * *", NEW_YORK, utc(2026, 10, 30, 12), utc(2026, 11, 2, 12)) == [
        utc(2026, 10, 31, 6, 30),  # 02:30 EDT
        utc(2026, 11, 1, 7, 30),   # 02:30 EST
        utc(2026, 11, 2, 7, 30),
    ]


def test_new_york_fall_back_daily_0130_fires_once_at_the_first_occurrence():
    assert fires("30 1 * * *", NEW_YORK, utc(2026, 10, 30, 12), utc(2026, 11, 3, 12)) == [
        utc(2026, 10, 31, 5, 30),  # 01:30 EDT
        utc(2026, 11, 1, 5, 30),   # 01:30 EDT, not again at 01:30 EST (06:30Z)
        utc(2026, 11, 2, 6, 30),   # 01:30 EST (croniter 5.0.1's zone-aware mode says 07:30Z here)
        utc(2026, 11, 3, 6, 30),
    ]


def test_new_york_fall_back_hourly_fires_the_repeated_hour_once():
    assert fires("0 * * * *", NEW_YORK, utc(2026, 11, 1, 3, 30), utc(2026, 11, 1, 8, 0)) == [
        utc(2026, 11, 1, 4), utc(2026, 11, 1, 5),  # 00:00, 01:00 EDT
        utc(2026, 11, 1, 7), utc(2026, 11, 1, 8),  # 02:00, 03:00 EST; 01:00 EST (06:00Z) does not fire
    ]
    day = fires("0 * * * *", NEW_YORK, utc(2026, 11, 1, 3, 59), utc(2026, 11, 2, 4, 59))
    assert len(day) == 24  # a 25-hour local day, 24 wall-clock hours


def test_inside_the_repeated_hour_the_next_fire_is_after_it():
    every_20 = TimeTrigger("*/20 * * * *", NEW_YORK)
    assert next_fire(every_20, utc(2026, 11, 1, 5, 50)) == utc(2026, 11, 1, 7, 0)  # 01:50 EDT -> 02:00 EST
    assert next_fire(every_20, utc(2026, 11, 1, 6, 10)) == utc(2026, 11, 1, 7, 0)  # 01:10 EST -> 02:00 EST
    seconds = TimeTrigger("*/10 * * * * *", NEW_YORK)  # every 10 s: skips the whole second pass
    assert next_fire(seconds, utc(2026, 11, 1, 6, 0, 5)) == utc(2026, 11, 1, 7, 0)


# Europe/London, 2026-03-29: 01:00 GMT jumps to 02:00 BST (01:00Z); 2026-10-25: 02:00 BST falls back to 01:00 GMT.
def test_london_spring_forward():
    assert fires("30 2 * * *", LONDON, utc(2026, 3, 27, 12), utc(2026, 3, 30, 12)) == [
        utc(2026, 3, 28, 2, 30), utc(2026, 3, 29, 1, 30), utc(2026, 3, 30, 1, 30)]  # 02:30 exists (BST)
    assert fires("30 1 * * *", LONDON, utc(2026, 3, 28, 12), utc(2026, 3, 30, 12)) == [
        utc(2026, 3, 29, 1, 0),  # 01:30 skipped: 02:00 BST
        utc(2026, 3, 30, 0, 30)]
    assert fires("0 * * * *", LONDON, utc(2026, 3, 28, 23, 30), utc(2026, 3, 29, 3, 0)) == [
        utc(2026, 3, 29, 0), utc(2026, 3, 29, 1), utc(2026, 3, 29, 2), utc(2026, 3, 29, 3)]


def test_london_fall_back():
    assert fires("30 2 * * *", LONDON, utc(2026, 10, 23, 12), utc(2026, 10, 26, 12)) == [
        utc(2026, 10, 24, 1, 30), utc(2026, 10, 25, 2, 30), utc(2026, 10, 26, 2, 30)]
    assert fires("30 1 * * *", LONDON, utc(2026, 10, 24, 12), utc(2026, 10, 26, 12)) == [
        utc(2026, 10, 25, 0, 30),  # 01:30 BST, the first of the two
        utc(2026, 10, 26, 1, 30)]
    assert fires("0 * * * *", LONDON, utc(2026, 10, 24, 22, 30), utc(2026, 10, 25, 3, 0)) == [
        utc(2026, 10, 24, 23), utc(2026, 10, 25, 0),  # 00:00, 01:00 BST
        utc(2026, 10, 25, 2), utc(2026, 10, 25, 3)]   # 02:00, 03:00 GMT; 01:00 GMT does not fire


def test_tokyo_fires_at_the_right_utc_time():
    assert fires("0 9 * * *", TOKYO, utc(2026, 3, 6, 12), utc(2026, 3, 9, 12)) == [
        utc(2026, 3, 7, 0), utc(2026, 3, 8, 0), utc(2026, 3, 9, 0)]
    assert fires("30 2 * * *", TOKYO, utc(2026, 3, 7), utc(2026, 3, 8, 20)) == [
        utc(2026, 3, 7, 17, 30), utc(2026, 3, 8, 17, 30)]  # 02:30 JST is 17:30Z the day before


def test_a_six_field_cron_has_seconds_first():
    assert fires("15 0 * * * *", NEW_YORK, utc(2026, 3, 8, 5, 30), utc(2026, 3, 8, 8, 0)) == [
        utc(2026, 3, 8, 6, 0, 15),  # 01:00:15 EST
        utc(2026, 3, 8, 7, 0, 0),   # 02:00:15 skipped: 03:00:00 EDT
        utc(2026, 3, 8, 7, 0, 15),  # 03:00:15 EDT
    ]


def test_the_window_excludes_after_and_includes_until():
    daily = TimeTrigger("0 0 * * *")
    assert next_fire_times(daily, utc(2026, 1, 1), utc(2026, 1, 3)) == [utc(2026, 1, 2), utc(2026, 1, 3)]
    assert next_fire_times(daily, utc(2026, 1, 1), utc(2026, 1, 1, 23)) == []
    assert next_fire(daily, utc(2026, 1, 1, 23, 59, 59, 999999)) == utc(2026, 1, 2)
    with pytest.raises(ValueError):
        next_fire_times(daily, datetime(2026, 1, 1), utc(2026, 1, 3))


def test_a_pending_time_trigger_wakes_exactly_at_the_end_of_the_gap():
    trigger = TimeTrigger("30 2 * * *", NEW_YORK)
    state = start(trigger, utc(2026, 3, 7, 12))
    assert evaluate(trigger, state, utc(2026, 3, 8, 6)) == Evaluation(False, utc(2026, 3, 8, 7))
    assert evaluate(trigger, state, utc(2026, 3, 8, 7)) == Evaluation(True, None, utc(2026, 3, 8, 7))


def test_the_servers_zone_never_leaks_in(monkeypatch):
    expected = fires("30 2 * * *", NEW_YORK, utc(2026, 3, 6, 12), utc(2026, 3, 10, 12))
    for server_zone in ("Asia/Kolkata", "America/Los_Angeles", "Europe/London"):
        monkeypatch.setenv("TZ", server_zone)
        time.tzset()
        # A window never asked before: nothing comes from the cache.
        shifted = fires("30 2 * * *", NEW_YORK, utc(2026, 3, 6, 12) + timedelta(seconds=len(server_zone)),
                        utc(2026, 3, 10, 12))
        assert shifted == expected
    monkeypatch.undo()
    time.tzset()


# Time leaves and composites
def test_time_trigger_fires_at_the_first_cron_time_after_the_job_started():
    trigger = TimeTrigger("0 */6 * * *")
    state = start(trigger, at(hours=6))  # a fire at the very start belongs to the previous job
    assert evaluate(trigger, state, at(hours=7)) == Evaluation(False, at(hours=12))
    assert evaluate(trigger, state, at(hours=12)) == Evaluation(True, None, at(hours=12))
    assert evaluate(trigger, state, at(hours=30)).logical_time == at(hours=12)


def test_logical_time_of_and_is_the_latest_fire_and_of_or_the_earliest():
    daily, hourly = TimeTrigger("0 0 * * *"), TimeTrigger("0 * * * *")
    both = AndTrigger((daily, hourly))
    either = OrTrigger((daily, hourly))
    assert evaluate(both, start(both, at(hours=22.5)), at(hours=30)).logical_time == at(hours=24)
    assert evaluate(either, start(either, at(hours=22.5)), at(hours=30)).logical_time == at(hours=23)
    data_or_time = OrTrigger((PartitionTrigger("ns", "a"), daily))
    assert evaluate(data_or_time, feed(data_or_time, parts("1")), at(hours=1)) == Evaluation(True, None, None)


TIMED_LEAVES = st.one_of(st.builds(ElapsedTrigger, st.integers(1, 7200)),
                         st.builds(TimeTrigger, st.sampled_from(["*/7 * * * *", "15 3 * * *", "0 */2 * * *"]),
                                   st.sampled_from(["UTC", "America/New_York", "Asia/Kolkata"])),
                         st.builds(QuietPeriodTrigger, st.just("ns"), st.just("a"), st.integers(1, 3600)),
                         LEAF_TRIGGERS)
TIMED_TREES = st.recursive(TIMED_LEAVES, lambda sub: st.one_of(
    st.lists(sub, min_size=1, max_size=3).map(lambda c: AndTrigger(tuple(c))),
    st.lists(sub, min_size=1, max_size=3).map(lambda c: OrTrigger(tuple(c)))), max_leaves=5)


@settings(max_examples=100, deadline=None)
@given(TIMED_TREES, NOTIFICATIONS, st.integers(0, 20_000))
def test_wake_at_is_exactly_when_time_alone_satisfies_the_trigger(trigger, notifications, offset):
    state = start(trigger, T0)
    for i, n in enumerate(notifications):
        state = observe(trigger, state, n, at(seconds=i))
    now = at(seconds=offset)
    result = evaluate(trigger, state, now)
    if result.satisfied:
        assert result.wake_at is None and evaluate(trigger, state, now + timedelta(days=3)).satisfied
    elif result.wake_at is None:
        assert not evaluate(trigger, state, now + timedelta(days=3)).satisfied
    else:
        assert result.wake_at > now
        assert not evaluate(trigger, state, result.wake_at - timedelta(microseconds=1)).satisfied
        assert evaluate(trigger, state, result.wake_at).satisfied
