"""The matcher's timers on a simulated clock: cron fires (none lost across downtime), elapsed and
quiet-period triggers, program-status triggers. No sleeping: the clock is advanced and due timers fired."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from sluice.eventlog.batched import expand_all
from sluice.clock import SimulatedClock
from sluice.domain.common import (
    Notification,
    PartitionCommitted,
    PartitionRef,
    ProgramRef,
    ProgramStatusChanged,
    RunStatus,
)
from sluice.domain.matching import JobTriggered
from sluice.domain.schedules import Schedule
from sluice.domain.triggers import ElapsedTrigger, OrTrigger, PartitionTrigger, ProgramStatusTrigger, QuietPeriodTrigger, TimeTrigger
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.eventlog.codec import EventTypes
from sluice.domain.schedules import MisfirePolicy
from sluice.domain import matching
from sluice_services.matcher.decisions import partition_stream
from sluice_services.matcher.service import MatcherService
from tests.support.matcher_inputs import MatcherInputs

T0 = datetime(2026, 11, 22, 0, 10, tzinfo=timezone.utc)
PROGRAM = ProgramRef("experiments", "clickstream", "hourly_metrics")
TYPES = EventTypes(matching.EVENTS)


async def setup(tmp_path, trigger, **schedule) -> tuple[SimulatedClock, SqliteEventLog, MatcherService, MatcherInputs]:
    clock = SimulatedClock(T0)
    log = SqliteEventLog(tmp_path / "events.db", clock=clock)
    matcher = MatcherService(log, clock)
    inputs = MatcherInputs(matcher)  # through the bus handlers, as the lookup stage republishes
    await inputs.observe("s-1", Schedule("s-1", "sched", PROGRAM, trigger, enabled=True, **schedule))
    return clock, log, matcher, inputs


def fired(log) -> list[JobTriggered]:
    return [TYPES.decode(r) for r in expand_all(log.read_all(0, 10_000)) if r.type == "JobTriggered"]


def partition(n: int) -> Notification:
    return Notification(f"n-{n}", T0, PartitionCommitted("experiments", "clickstream", (PartitionRef({"hour": str(n)}, f"/d/{n}"),)))


async def test_cron_in_a_zone_fires_at_the_right_instant_and_catches_up_after_downtime(tmp_path):
    clock, log, matcher, inputs = await setup(tmp_path, TimeTrigger("0 * * * *", "Asia/Tokyo"), misfire_policy=MisfirePolicy.FIRE_EACH)
    assert matcher.next_wake_at() == datetime(2026, 11, 22, 1, tzinfo=timezone.utc)
    clock.advance(timedelta(minutes=49))
    assert matcher.fire_due() == 0 and fired(log) == []
    clock.advance(timedelta(minutes=1))
    assert matcher.fire_due() == 1
    assert [e.job.context.logical_time for e in fired(log)] == [datetime(2026, 11, 22, 1, tzinfo=timezone.utc)]

    clock.advance(timedelta(hours=3, minutes=30))  # the service was down across three fire times
    restarted = MatcherService(log, clock)
    restarted.recover()
    restarted.fire_due()
    assert [e.job.context.logical_time.hour for e in fired(log)] == [1, 2, 3, 4]
    assert len({e.job.id for e in fired(log)}) == 4
    assert restarted.next_wake_at() == datetime(2026, 11, 22, 5, tzinfo=timezone.utc)


async def test_or_with_elapsed_fires_with_what_exists_after_the_timeout(tmp_path):
    trigger = OrTrigger((PartitionTrigger("experiments", "clickstream", 3), ElapsedTrigger(600)))
    clock, log, matcher, inputs = await setup(tmp_path, trigger)
    await inputs.match(partition(1))
    clock.advance(timedelta(seconds=599))
    matcher.fire_due()
    assert fired(log) == []
    clock.advance(timedelta(seconds=1))
    matcher.fire_due()
    (event,) = fired(log)
    assert [n.id for n in event.job.context.notifications] == ["n-1"]


async def test_quiet_period_fires_after_the_last_chunk_of_a_burst(tmp_path):
    clock, log, matcher, inputs = await setup(tmp_path, QuietPeriodTrigger("experiments", "clickstream", 600))
    await inputs.match(partition(1))
    clock.advance(timedelta(minutes=5))
    await inputs.match(partition(2))
    clock.advance(timedelta(minutes=9))
    matcher.fire_due()
    assert fired(log) == []  # only 9 minutes since the second chunk
    assert matcher.next_wake_at() == T0 + timedelta(minutes=15)
    clock.advance(timedelta(minutes=1))
    matcher.fire_due()
    assert [n.id for n in fired(log)[0].job.context.notifications] == ["n-1", "n-2"]


async def test_program_status_trigger_hands_over_the_triggering_run(tmp_path):
    upstream = ProgramRef("experiments", "clickstream", "ingest")
    clock, log, matcher, inputs = await setup(tmp_path, ProgramStatusTrigger("experiments", "clickstream", "ingest", ("COMPLETED",), 1))
    await inputs.match(Notification("st-1", T0, ProgramStatusChanged(upstream, "run-9", RunStatus.FAILED)))
    assert fired(log) == []
    await inputs.match(Notification("st-2", T0, ProgramStatusChanged(upstream, "run-10", RunStatus.COMPLETED)))
    (event,) = fired(log)
    assert [n.payload.run_id for n in event.job.context.notifications] == ["run-10"]


async def test_the_next_wake_up_is_the_earliest_live_timer_once_others_moved_or_went(tmp_path):
    clock, log, matcher, inputs = await setup(tmp_path, QuietPeriodTrigger("experiments", "clickstream", 600))
    await inputs.observe("s-2", Schedule("s-2", "hourly", PROGRAM, TimeTrigger("0 * * * *"), enabled=True))
    assert matcher.next_wake_at() == datetime(2026, 11, 22, 1, tzinfo=timezone.utc)
    await inputs.match(partition(1))
    assert matcher.next_wake_at() == T0 + timedelta(minutes=10)
    clock.advance(timedelta(minutes=5))
    await inputs.match(partition(2))  # the quiet period starts again: its first timer is superseded
    assert matcher.next_wake_at() == T0 + timedelta(minutes=15)
    await inputs.observe("s-1", None)
    assert matcher.next_wake_at() == datetime(2026, 11, 22, 1, tzinfo=timezone.utc)
    log.close()


async def test_a_burst_of_fires_freezes_what_survived_it(tmp_path, monkeypatch):
    """The states a burst leaves are frozen at once (gc.freeze), not walked
    by the next handlers' collections; a few fires leave that to the service's periodic freeze."""
    from sluice.runtime import heap
    from sluice_services.matcher import service
    frozen = []
    monkeypatch.setattr(heap.gc, "freeze", lambda: frozen.append(True))
    monkeypatch.setattr(service, "FROZEN_AFTER_FIRES", 2)
    clock, log, matcher, inputs = await setup(tmp_path, TimeTrigger("0 * * * *"))
    clock.advance(timedelta(minutes=50))
    assert matcher.fire_due() == 1 and frozen == []
    await inputs.observe("s-2", Schedule("s-2", "sched-2", PROGRAM, TimeTrigger("0 * * * *"), enabled=True))
    await inputs.observe("s-3", Schedule("s-3", "sched-3", PROGRAM, TimeTrigger("0 * * * *"), enabled=True))
    clock.advance(timedelta(hours=1))
    assert matcher.fire_due() == 3 and frozen == [True]



async def test_timers_due_at_once_fire_in_the_order_they_were_set_minute_after_minute(tmp_path):
    """Not in schedule id order: a burst then visits the schedules' states in the order they were made
    (registered, or fired the last time), not at random over the heap."""
    clock = SimulatedClock(T0)
    log = SqliteEventLog(tmp_path / "events.db", clock=clock)
    matcher = MatcherService(log, clock)
    inputs = MatcherInputs(matcher)
    one_partition = [f"s-{n}" for n in range(200) if partition_stream(f"s-{n}") == partition_stream("s-0")]
    ids = [*reversed(one_partition[:2]), *one_partition[2:4]]  # one batch record holds them in the order decided
    assert sorted(ids) != ids
    for schedule_id in ids:
        await inputs.observe(schedule_id, Schedule(schedule_id, schedule_id, PROGRAM, TimeTrigger("*/5 * * * *"),
                                                   enabled=True))
    for minute in (15, 20):
        clock.set(T0.replace(minute=minute))
        assert matcher.fire_due() == 4
        assert [e.job.schedule_id for e in fired(log)][-4:] == ids
