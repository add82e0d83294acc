"""Run now and backfill in the checker's aggregate, scenario by scenario on a simulated clock:
pure decide/evolve (sluice.domain.backfills, sluice.domain.checking), no services."""
from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from sluice.domain import checking
from sluice.domain.backfills import (
    MAX_BACKFILL_JOBS,
    fire_times,
    BackfillRequested,
    CancelBackfill,
    CandidatePartition,
    ManualJobRequested,
    RunScheduleNow,
    StartBackfill,
)
from sluice.domain.checking import CheckerState, CheckTime, ObserveRun, ObserveSchedule, admitted_jobs
from sluice.domain.common import PartitionCommitted, PartitionRef, ProgramRef, RunStatus
from sluice.domain.constraints import (
    ConcurrencyConstraint,
    DelayConstraint,
    MinSinceLastRunConstraint,
)
from sluice.domain.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from sluice.eventlog.codec import EventTypes, encode
from sluice.eventlog.port import RecordedEvent
from sluice.domain.schedules import Schedule, as_observed
from sluice.domain.triggers import OrTrigger, PartitionTrigger, TimeTrigger, next_fire_times
from sluice.ids import run_id_for
from sluice.runtime.aggregates import Loaded
from sluice.runtime.snapshots import Schema, pack, unpack
from sluice_services.checker.service import SNAPSHOT_VERSION

T0 = datetime(2026, 11, 22, 12, tzinfo=timezone.utc)
DAILY = ProgramRef("experiments", "clickstream", "daily_metrics")
MARKETPLACES = ("JP", "UK", "US")
DATES = [f"2026-11-{day:02d}" for day in range(1, 8)]


def daily(*constraints, enabled: bool = True, trigger=None) -> Schedule:
    trigger = trigger or OrTrigger((PartitionTrigger("experiments", "clickstream_daily_input", 1),
                                    TimeTrigger("0 2 * * *", "Europe/London")))
    return Schedule("daily", "daily_metrics", DAILY, trigger, properties={"limit": "240"}, enabled=enabled,
                    constraints=constraints or (ConcurrencyConstraint(2),))


def tracked(schedule: Schedule) -> CheckerState:
    return checking.fold(CheckerState(), checking.decide(CheckerState(), ObserveSchedule(schedule.id, schedule), T0))


def step(state: CheckerState, command, now: datetime = T0):
    events = checking.decide(state, command, now)
    return checking.fold(state, events), events


def admitted(events) -> list:
    return admitted_jobs(events)


def partitions() -> tuple[CandidatePartition, ...]:
    return tuple(CandidatePartition(PartitionRef({"marketplace": m, "date": d}, f"/data/{m}/{d}"),
                                    datetime.fromisoformat(d).replace(tzinfo=timezone.utc) + timedelta(hours=3))
                 for d in DATES for m in MARKETPLACES)


def test_a_backfill_of_7_days_x_3_marketplaces_runs_21_jobs_two_at_a_time_each_partition_once():
    state = tracked(daily())
    state, events = step(state, StartBackfill("daily", None, None, partitions(), keys="date=2026-11-01..2026-11-08"))
    requested = next(e for e in events if isinstance(e, BackfillRequested))
    assert len(requested.items) == 21
    running = admitted(events)
    assert len(running) == 2
    seen, now, most = [], T0, 0
    while running:
        finished, running = running[0], running[1:]
        seen.append(finished)
        now += timedelta(minutes=1)
        state, events = step(state, ObserveRun(DAILY, run_id_for(finished.id), RunStatus.COMPLETED, now), now)
        running += admitted(events)
        most = max(most, len(running))
    assert most <= 2
    keys = [tuple(sorted(p.key.items())) for job in seen for n in job.context.notifications
            for p in n.payload.partitions]
    assert len(keys) == 21 and len(set(keys)) == 21
    for job in seen:
        (notification,) = job.context.notifications
        assert isinstance(notification.payload, PartitionCommitted)
        (partition,) = notification.payload.partitions
        assert job.context.logical_time == datetime.fromisoformat(partition.key["date"]).replace(
            tzinfo=timezone.utc) + timedelta(hours=3)
    assert [job.context.logical_time for job in seen] == sorted(job.context.logical_time for job in seen)
    progress = state.requested.backfills[requested.backfill_id]
    assert (progress.done, progress.running, progress.waiting, progress.failed) == (21, 0, 0, 0)


def test_replaying_a_backfill_mid_way_gives_the_same_queue_and_progress():
    state = tracked(daily())
    log = list(checking.decide(CheckerState(), ObserveSchedule("daily", daily()), T0))
    events = checking.decide(state, StartBackfill("daily", None, None, partitions()), T0)
    log += events
    state = checking.fold(state, events)
    first = admitted(events)[0]
    events = checking.decide(state, ObserveRun(DAILY, run_id_for(first.id), RunStatus.FAILED, T0), T0)
    log += events
    state = checking.fold(state, events)
    replayed = checking.fold(CheckerState(), log)
    assert replayed == state
    (progress,) = replayed.requested.backfills.values()
    assert (progress.done, progress.failed, progress.running, progress.waiting) == (1, 1, 2, 18)


def test_a_time_backfill_makes_one_job_per_fire_time_in_the_half_open_range():
    state = tracked(replace(daily(), timeout_seconds=60))
    start = datetime(2026, 11, 1, tzinfo=timezone.utc)
    state, events = step(state, StartBackfill("daily", start, start + timedelta(days=7)))
    requested = next(e for e in events if isinstance(e, BackfillRequested))
    assert [item.logical_time for item in requested.items] == [start + timedelta(days=d, hours=2) for d in range(7)]
    assert all(item.partition is None for item in requested.items)
    assert requested.template.timeout_seconds == 0  # its jobs wait in line on purpose: none times out


def test_a_cancelled_backfill_withdraws_its_waiting_jobs_and_leaves_the_running_ones():
    state = tracked(daily())
    state, events = step(state, StartBackfill("daily", None, None, partitions()))
    backfill_id = next(e for e in events if isinstance(e, BackfillRequested)).backfill_id
    state, events = step(state, CancelBackfill(backfill_id))
    (cancelled,) = events
    assert len(cancelled.withdrawn) == 19
    assert not state.queue
    progress = state.requested.backfills[backfill_id]
    assert (progress.waiting, progress.running, progress.discarded) == (0, 2, 19)
    assert progress.cancelled_at == T0
    assert checking.decide(state, CancelBackfill(backfill_id), T0) == []


def test_a_backfill_over_the_bound_is_refused_naming_to():
    every_minute = daily(trigger=TimeTrigger("* * * * *"))
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    with pytest.raises(InvalidArgument) as refused:
        checking.decide(tracked(every_minute), StartBackfill("daily", start, start + timedelta(minutes=MAX_BACKFILL_JOBS + 1)), T0)
    assert refused.value.field == "--to"
    exactly = checking.decide(tracked(every_minute),
                              StartBackfill("daily", start, start + timedelta(minutes=MAX_BACKFILL_JOBS)), T0)
    assert len(next(e for e in exactly if isinstance(e, BackfillRequested)).items) == MAX_BACKFILL_JOBS


def test_a_backfill_walks_at_most_the_bound_of_fire_times_however_many_time_triggers_share_them():
    """Each time trigger's fires were walked to the end while the distinct times stayed under the bound: 256
    leaves of an hourly cron over 9,999 hours took 80 s of the checker's loop."""
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    end = start + timedelta(hours=5_000)
    hourly = (TimeTrigger("0 * * * *"), TimeTrigger("0 */1 * * *"), TimeTrigger("0 0-23 * * *"))  # the same times
    with pytest.raises(InvalidArgument) as refused:
        checking.decide(tracked(daily(trigger=OrTrigger(hourly))), StartBackfill("daily", start, end), T0)
    assert refused.value.field == "--to" and "counted per time trigger" in refused.value.message
    repeated = checking.decide(tracked(daily(trigger=OrTrigger((hourly[0],) * 200))), StartBackfill("daily", start, end),
                               T0)
    assert len(next(e for e in repeated if isinstance(e, BackfillRequested)).items) == 5_000


def test_unknown_and_disabled_schedules_are_refused_by_name():
    with pytest.raises(NotFound, match="schedule nope"):
        checking.decide(CheckerState(), RunScheduleNow("nope"), T0)
    with pytest.raises(FailedPrecondition, match="schedule daily"):
        checking.decide(tracked(daily(enabled=False)), StartBackfill("daily", T0, T0 + timedelta(days=1)), T0)
    with pytest.raises(FailedPrecondition, match="schedule daily .* is paused"):
        checking.decide(tracked(as_observed(replace(daily(), paused=True))), RunScheduleNow("daily"), T0)


def test_run_now_goes_through_the_constraints_and_ignore_constraints_skips_only_the_timing_ones():
    schedule = daily(ConcurrencyConstraint(1), DelayConstraint(600), MinSinceLastRunConstraint(3600))
    state = tracked(schedule)
    state, events = step(state, RunScheduleNow("daily", {"limit": "5"}))
    (manual,) = [e for e in events if isinstance(e, ManualJobRequested)]
    assert not admitted(events)  # waits for its delay
    assert manual.job.context.properties == {"limit": "5"} and manual.job.context.logical_time == T0
    state, events = step(state, CheckTime(), T0 + timedelta(seconds=600))
    assert [job.id for job in admitted(events)] == [manual.job.id]
    # a second run now: the first's run goes (concurrency 1) and started a minute ago (min-since-last-run)
    later = T0 + timedelta(seconds=660)
    state, events = step(state, RunScheduleNow("daily", ignore_constraints=True,
                                               logical_time=datetime(2026, 11, 1, tzinfo=timezone.utc)), later)
    (forced,) = [e for e in events if isinstance(e, ManualJobRequested)]
    assert not admitted(events) and forced.job.constraints == (ConcurrencyConstraint(1),)
    state, events = step(state, ObserveRun(DAILY, run_id_for(manual.job.id), RunStatus.COMPLETED, later), later)
    assert [job.id for job in admitted(events)] == [forced.job.id]  # concurrency freed, timing ones skipped
    assert forced.job.context.logical_time == datetime(2026, 11, 1, tzinfo=timezone.utc)


def test_a_request_id_given_again_makes_no_second_job():
    state = tracked(daily(trigger=TimeTrigger("0 2 * * *")))
    state, events = step(state, RunScheduleNow("daily", request_id="r-1"))
    assert len(events) == 2  # requested, admitted
    assert checking.decide(state, RunScheduleNow("daily", request_id="r-1"), T0) == []
    start = T0 - timedelta(days=2)
    state, events = step(state, StartBackfill("daily", start, T0, request_id="b-1"))
    assert checking.decide(state, StartBackfill("daily", start, T0, request_id="b-1"), T0) == []


def test_a_request_id_given_again_with_another_request_is_refused_and_the_same_one_in_other_words_is_not():
    state = tracked(daily(trigger=TimeTrigger("0 2 * * *")))
    asked = RunScheduleNow("daily", {"a": "1", "b": "2"}, T0 - timedelta(hours=1), request_id="r-1")
    state, _ = step(state, asked)
    in_paris = (T0 - timedelta(hours=1)).astimezone(timezone(timedelta(hours=1)))
    assert checking.decide(state, replace(asked, properties={"b": "2", "a": "1"}, logical_time=in_paris), T0) == []
    for other in (replace(asked, properties={"a": "1"}), replace(asked, logical_time=None),
                  replace(asked, ignore_constraints=True)):
        with pytest.raises(AlreadyExists, match="request_id 'r-1' was given earlier to a different run-now request"):
            checking.decide(state, other, T0)
    assert checking.decide(state, replace(asked, properties={"a": "1"}, request_id="r-2"), T0)  # a new id: a new job
    start = T0 - timedelta(days=2)
    keyed = StartBackfill("daily", start, T0, request_id="b-1", key_ranges=(("date", "2026-11-01", ""), ("m", "", "U")))
    state, _ = step(state, keyed)
    assert checking.decide(state, replace(keyed, key_ranges=keyed.key_ranges[::-1]), T0) == []
    for other in (replace(keyed, start=start + timedelta(days=1)), replace(keyed, end=None),
                  replace(keyed, key_ranges=(("date", "2026-11-01", ""),)),
                  replace(keyed, key_ranges=(("date", "", "2026-11-01"), ("m", "", "U")))):
        with pytest.raises(AlreadyExists, match="request_id 'b-1' was given earlier to a different backfill"):
            checking.decide(state, other, T0)


def test_requests_recorded_before_their_fingerprint_was_kept_take_any_request_given_again_for_theirs():
    state = tracked(daily(trigger=TimeTrigger("0 2 * * *")))
    start = T0 - timedelta(days=2)
    events = [*checking.decide(state, RunScheduleNow("daily", {"a": "1"}, request_id="r-1"), T0),
              *checking.decide(state, StartBackfill("daily", start, T0, request_id="b-1"), T0)]
    types = EventTypes(checking.EVENTS)
    replayed = []
    for number, event in enumerate(events, start=1):
        recorded = json.loads(encode(event, f"old-{number}").data)
        recorded.pop("fingerprint", None)  # as the events of an older release were written
        replayed.append(types.decode(RecordedEvent(f"old-{number}", "checker-queue", number - 1, number,
                                                   type(event).__name__, json.dumps(recorded).encode(), {}, T0)))
    assert [getattr(e, "fingerprint", "") for e in replayed] == [""] * len(replayed)
    state = checking.fold(state, replayed)
    assert checking.decide(state, RunScheduleNow("daily", {"a": "2"}, request_id="r-1"), T0) == []
    assert checking.decide(state, StartBackfill("daily", start - timedelta(days=1), T0, request_id="b-1"), T0) == []


def test_a_partition_backfill_keeps_only_the_partitions_its_trigger_admits():
    only_us = daily(trigger=PartitionTrigger("experiments", "clickstream_daily_input", 1, {"marketplace": ("US",)}))
    _, events = step(tracked(only_us), StartBackfill("daily", None, None, partitions()))
    requested = next(e for e in events if isinstance(e, BackfillRequested))
    assert [item.partition.key["date"] for item in requested.items] == DATES
    assert {item.partition.key["marketplace"] for item in requested.items} == {"US"}


def test_the_checkers_state_with_a_backfill_under_way_round_trips_through_a_snapshot():
    state = tracked(daily())
    state, _ = step(state, RunScheduleNow("daily", request_id="r-1"))
    state, events = step(state, StartBackfill("daily", None, None, partitions(), request_id="b-1"))
    first = admitted(events)[0]
    state, _ = step(state, ObserveRun(DAILY, run_id_for(first.id), RunStatus.COMPLETED, T0))
    schema = Schema(dict[str, Loaded[CheckerState]], SNAPSHOT_VERSION)
    snapshot = {checking.QUEUE_STREAM: Loaded(state, 7)}
    restored = unpack(pack(snapshot, schema, "checker", lambda: None), schema, "checker")
    assert restored == snapshot
    assert restored[checking.QUEUE_STREAM].state.requested.backfills == state.requested.backfills


@pytest.mark.parametrize("cron, zone", [("30 2 * * *", "America/New_York"), ("0 1 * * 0", "Europe/London"),
                                        ("*/20 * * * *", "Australia/Lord_Howe"), ("15 0 1 * *", "UTC"),
                                        ("0 30 1 * * *", "America/New_York")])
def test_fire_times_walk_the_cron_as_next_fire_finds_each_fire_across_dst(cron, zone):
    trigger = TimeTrigger(cron, zone)
    start, end = datetime(2026, 1, 1, tzinfo=timezone.utc), datetime(2027, 1, 1, tzinfo=timezone.utc)
    if cron.startswith("*/20"):
        end = datetime(2026, 5, 1, tzinfo=timezone.utc)  # its April DST change, in fewer fires
    expected = next_fire_times(trigger, start - timedelta(microseconds=1), end - timedelta(microseconds=1))
    assert list(fire_times(trigger, start, end)) == expected
