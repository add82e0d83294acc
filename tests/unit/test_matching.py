from dataclasses import replace
from datetime import datetime, timedelta, timezone

from sluice.domain.common import Notification, PartitionCommitted, PartitionRef, ProgramRef
from sluice.domain.matching import (
    JobCreated,
    JobDiscarded,
    JobTriggered,
    MatcherState,
    RECENT_PER_SCHEDULE,
    MatchNotification,
    NotificationMatched,
    ObserveSchedule,
    decide,
    evolve,
)
from sluice.domain.schedules import Schedule
from sluice.domain.triggers import PartitionTrigger

T0 = datetime(2026, 11, 22, 10, tzinfo=timezone.utc)
PROGRAM = ProgramRef("experiments", "clickstream", "hourly_metrics")


def schedule(count: int = 1, enabled: bool = True, generation: int = 1) -> Schedule:
    return Schedule("sched-1", "hourly", PROGRAM, PartitionTrigger("experiments", "clickstream", count),
                    {"experiment": "exp-42"}, enabled=enabled, generation=generation)


def notification(n: int, dataset: str = "clickstream", partitions: int = 1) -> Notification:
    refs = tuple(PartitionRef({"hour": f"{n:02d}", "part": str(i)}, f"/data/{dataset}/{n}/{i}", 100, 10)
                 for i in range(partitions))
    return Notification(f"n-{dataset}-{n}", T0 + timedelta(minutes=n), PartitionCommitted("experiments", dataset, refs))


def run(state: MatcherState, *commands) -> tuple[MatcherState, list]:
    produced = []
    for command in commands:
        events = decide(state, command, T0)
        for event in events:
            state = evolve(state, event)
        produced += events
    return state, produced


def observed(s: Schedule) -> MatcherState:
    return run(MatcherState(), ObserveSchedule(s.id, s))[0]


def test_count_one_triggers_on_the_first_partition_with_its_context():
    _, events = run(observed(schedule()), MatchNotification(notification(1)))
    assert [type(e) for e in events] == [JobTriggered]  # created, matched and fired at once: one event
    job = events[-1].job
    assert job.context.schedule_name == "hourly"
    assert job.context.properties == {"experiment": "exp-42"}
    assert [(ns, ds, p.location) for ns, ds, p in job.context.partitions()] == [("experiments", "clickstream", "/data/clickstream/1/0")]


def test_count_three_waits_for_three_partitions_then_starts_a_new_job():
    state, events = run(observed(schedule(count=3)), MatchNotification(notification(1)), MatchNotification(notification(2)))
    assert not any(isinstance(e, JobTriggered) for e in events)
    state, events = run(state, MatchNotification(notification(3)))
    triggered = [e for e in events if isinstance(e, JobTriggered)]
    assert len(triggered) == 1 and len(triggered[0].job.context.notifications) == 3
    state, events = run(state, MatchNotification(notification(4)))
    assert isinstance(events[0], NotificationMatched) and events[0].schedule_id == "sched-1"  # it created the job
    assert events[0].job_id != triggered[0].job.id


def test_one_event_per_decision_the_first_match_creates_the_job_the_fire_names_the_last():
    state, events = run(observed(schedule(count=3)), *[MatchNotification(notification(n)) for n in (1, 2, 3)])
    assert [type(e) for e in events] == [NotificationMatched, NotificationMatched, JobTriggered]
    assert [e.schedule_id for e in events[:2]] == ["sched-1", ""]
    assert events[2].notification_id == "n-clickstream-3" and notification(3) in events[2].job.context.notifications
    assert state.pending is None and run(state, MatchNotification(notification(3)))[1] == []  # still recent


def test_a_log_of_the_older_shape_folds_to_the_same_state():
    """JobCreated, a NotificationMatched per notification, then a JobTriggered naming none: what
    logs hold from before one event per decision."""
    start = observed(schedule(count=2))
    state, events = run(start, *[MatchNotification(notification(n)) for n in (1, 2)])
    created, fired = events[0], events[-1]
    older = [JobCreated(created.job_id, "sched-1", 1, T0), replace(created, schedule_id=""),
             NotificationMatched(created.job_id, notification(2), T0), replace(fired, notification_id="")]
    folded = start
    for event in older:
        folded = evolve(folded, event)
    assert folded == state


def test_partitions_are_counted_not_notifications():
    _, events = run(observed(schedule(count=3)), MatchNotification(notification(1, partitions=3)))
    assert isinstance(events[-1], JobTriggered)


def test_redelivered_notification_has_no_effect():
    state, _ = run(observed(schedule(count=2)), MatchNotification(notification(1)))
    assert decide(state, MatchNotification(notification(1)), T0) == []


def test_other_datasets_and_disabled_schedules_do_not_match():
    assert decide(observed(schedule()), MatchNotification(notification(1, dataset="other")), T0) == []
    assert decide(observed(schedule(enabled=False)), MatchNotification(notification(1)), T0) == []


def test_disabling_discards_the_pending_job():
    state, _ = run(observed(schedule(count=2)), MatchNotification(notification(1)))
    state, events = run(state, ObserveSchedule("sched-1", schedule(count=2, enabled=False)))
    assert [type(e) for e in events][0] is JobDiscarded and events[0].reason == "schedule disabled"
    assert state.pending is None


def test_deleting_discards_the_pending_job_and_stops_matching():
    state, _ = run(observed(schedule(count=2)), MatchNotification(notification(1)))
    state, events = run(state, ObserveSchedule("sched-1", None))
    assert isinstance(events[0], JobDiscarded) and events[0].reason == "schedule deleted"
    assert decide(state, MatchNotification(notification(2)), T0) == []


def test_job_ids_are_deterministic_for_replay():
    _, first = run(observed(schedule()), MatchNotification(notification(1)))
    _, again = run(observed(schedule()), MatchNotification(notification(1)))
    assert first == again


def test_step_gives_the_state_its_events_fold_to():
    """The matcher takes the state from `step` instead of evolving the events a second time."""
    from sluice.domain.matching import CheckTime, step
    from sluice.domain.triggers import AndTrigger, ElapsedTrigger, OrTrigger

    and_or_elapsed = replace(schedule(), trigger=OrTrigger((AndTrigger((
        PartitionTrigger("experiments", "clickstream", 2), PartitionTrigger("experiments", "views"))),
        ElapsedTrigger(3600))))
    commands = [ObserveSchedule("sched-1", schedule(count=2)), *[MatchNotification(notification(n)) for n in range(5)],
                MatchNotification(notification(2)), ObserveSchedule("sched-1", replace(schedule(), generation=2)),
                MatchNotification(notification(7)), ObserveSchedule("sched-1", replace(and_or_elapsed, generation=3)),
                MatchNotification(notification(8, "views")), MatchNotification(notification(9)), CheckTime(),
                MatchNotification(notification(10)), ObserveSchedule("sched-1", None), MatchNotification(notification(11)),
                ObserveSchedule("sched-1", replace(schedule(count=1), generation=4)),  # fires at each notification
                *[MatchNotification(notification(n)) for n in range(20, 23)], MatchNotification(notification(21))]
    state = MatcherState()
    for command in commands:
        events, after = step(state, command, T0 + timedelta(hours=2))
        folded = state
        for event in events:
            folded = evolve(folded, event)
        assert after == folded, command
        state = after


def test_a_notification_among_the_last_recent_ones_is_ignored_an_older_one_counts_again():
    last = RECENT_PER_SCHEDULE
    state, _ = run(observed(schedule(count=1)), *[MatchNotification(notification(n)) for n in range(last + 1)])
    assert run(state, MatchNotification(notification(last)))[1] == []
    assert run(state, MatchNotification(notification(1)))[1] == []
    assert [type(e) for e in run(state, MatchNotification(notification(0)))[1]] == [JobTriggered]


def test_a_cron_fire_names_the_next_job_in_one_event_and_an_older_log_folds_alike():
    from sluice.domain.matching import CheckTime, step
    from sluice.domain.triggers import TimeTrigger

    cron = replace(schedule(), trigger=TimeTrigger("0 * * * *"))
    start = observed(cron)
    assert start.pending is not None
    events, state = step(start, CheckTime(), T0 + timedelta(hours=1))
    [fired] = events
    assert isinstance(fired, JobTriggered) and fired.next_job_id == state.pending.job_id != fired.job.id
    assert fired.next_waiting_since == T0 + timedelta(hours=1) == state.pending.trigger.started_at
    older = [replace(fired, next_job_id="", next_waiting_since=None),
             JobCreated(fired.next_job_id, "sched-1", 1, fired.at, waiting_since=fired.next_waiting_since)]
    folded = start
    for event in older:
        folded = evolve(folded, event)
    assert folded == state == evolve(start, fired)
