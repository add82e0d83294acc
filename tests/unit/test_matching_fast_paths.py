"""The matcher's direct paths give what the generic ones give: a fired job equals the one its
constructors build, and a timer's check (`step(CheckTime)`) the state its events fold to."""
import dataclasses
from datetime import datetime, timedelta, timezone

import pytest

from sluice.domain import bounds, triggers
from sluice.domain.common import Notification, PartitionCommitted, PartitionRef, ProgramRef
from sluice.domain.constraints.specs import ConcurrencyConstraint, DelayConstraint, TimeoutPolicy
from sluice.domain.jobs import Job, RetryPolicy, TriggerContext, WaitingJobPolicy
from sluice.domain.matching import (
    CheckTime,
    JobTriggered,
    MatcherState,
    MatchNotification,
    ObserveSchedule,
    _fired_job,
    evolve,
    step,
    wake_at,
)
from sluice.domain.schedules import MisfirePolicy, Schedule
from sluice.domain.triggers import AndTrigger, ElapsedTrigger, OrTrigger, PartitionTrigger, TimeTrigger
from sluice.ids import derived_id

T0 = datetime(2026, 11, 22, 10, tzinfo=timezone.utc)
PROGRAM = ProgramRef("experiments", "clickstream", "hourly_metrics")


def full_schedule(trigger, **changes) -> Schedule:
    """Every field a job copies set to something other than its default."""
    values = dict(properties={"experiment": "exp-42"}, timeout_seconds=600, priority=7, enabled=True, generation=3,
                  constraints=(ConcurrencyConstraint(2, "group-a"), DelayConstraint(30)),
                  timeout_policy=TimeoutPolicy.FORCE_LAUNCH,
                  retry_policy=RetryPolicy(3, 10, 1.5, True), waiting_job_policy=WaitingJobPolicy.SEPARATE,
                  spark_conf={"spark.executor.memory": "2g"}, max_run_seconds=3600)
    values.update(changes)
    return Schedule("sched-1", "hourly", PROGRAM, trigger, **values)


def notification(n: int, dataset: str = "clickstream") -> Notification:
    ref = PartitionRef({"hour": f"{n:02d}"}, f"/data/{dataset}/{n}", 100, 10)
    return Notification(f"n-{dataset}-{n}", T0 + timedelta(minutes=n), PartitionCommitted("experiments", dataset, (ref,)))


def test_a_fired_job_equals_the_one_its_constructors_build():
    schedule = full_schedule(OrTrigger((PartitionTrigger("experiments", "clickstream", 2), TimeTrigger("0 * * * *"))))
    state = step(MatcherState(), ObserveSchedule(schedule.id, schedule), T0)[1]
    state = step(state, MatchNotification(notification(1)), T0 + timedelta(minutes=1))[1]
    pending = state.pending
    built = _fired_job(schedule, pending, T0 + timedelta(hours=1), T0 + timedelta(hours=1))
    context = TriggerContext(schedule.id, schedule.name, dict(schedule.properties),
                             triggers.matched_notifications(schedule.trigger, pending.trigger), T0 + timedelta(hours=1))
    expected = Job(pending.job_id, schedule.id, schedule.generation, schedule.program, context, pending.created_at,
                   schedule.priority, schedule.constraints, schedule.timeout_seconds, schedule.timeout_policy,
                   sequence=pending.sequence, triggered_at=T0 + timedelta(hours=1), retry_policy=schedule.retry_policy,
                   waiting_job_policy=schedule.waiting_job_policy, spark_conf=schedule.spark_conf,
                   max_run_seconds=schedule.max_run_seconds)
    assert built == expected and built.context == context
    assert vars(built).keys() == {f.name for f in dataclasses.fields(Job)}  # a field added to Job is given here too
    assert vars(built.context).keys() == {f.name for f in dataclasses.fields(TriggerContext)}
    assert built.context.notifications == (notification(1),)
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.priority = 0


TRIGGERS = {
    "cron": TimeTrigger("0 * * * *"),
    "cron in a zone": TimeTrigger("30 */2 * * *", "America/New_York"),
    "elapsed": ElapsedTrigger(5400),
    "cron or data": OrTrigger((TimeTrigger("*/20 * * * *"), PartitionTrigger("experiments", "clickstream", 2))),
    "cron and data": AndTrigger((TimeTrigger("0 * * * *"), PartitionTrigger("experiments", "clickstream"))),
}


@pytest.mark.parametrize("policy", list(MisfirePolicy))
@pytest.mark.parametrize("name", list(TRIGGERS))
def test_timer_checks_give_the_state_their_events_fold_to_and_the_timer_the_evaluation(name, policy):
    schedule = full_schedule(TRIGGERS[name], misfire_policy=policy, catch_up_seconds=4 * 3600)
    state = step(MatcherState(), ObserveSchedule(schedule.id, schedule), T0)[1]
    # on time, late (a misfire), a notification between, and a check with nothing due
    steps = [(CheckTime(), 1), (CheckTime(), 1.5), (MatchNotification(notification(100)), 1.6), (CheckTime(), 2),
             (CheckTime(), 2.01), (CheckTime(), 9), (MatchNotification(notification(101)), 9.1), (CheckTime(), 30)]
    fires = 0
    for command, hours in steps:
        now = T0 + timedelta(hours=hours)
        events, after = step(state, command, now)
        folded = state
        for event in events:
            folded = evolve(folded, event)
        assert after == folded, (command, hours)
        fires += sum(isinstance(event, JobTriggered) for event in events)
        when = wake_at(after, now)
        if after.pending is not None and name != "cron and data":
            evaluation = triggers.evaluate(schedule.trigger, after.pending.trigger, now)
            assert when == (now if evaluation.satisfied else evaluation.wake_at)
        state = after
    assert fires >= 1


def test_a_disabled_or_deleted_schedule_checks_nothing():
    schedule = full_schedule(TimeTrigger("0 * * * *"))
    state = step(MatcherState(), ObserveSchedule(schedule.id, schedule), T0)[1]
    disabled = step(state, ObserveSchedule(schedule.id, dataclasses.replace(schedule, enabled=False)), T0)[1]
    assert step(disabled, CheckTime(), T0 + timedelta(hours=1)) == ([], disabled)
    deleted = step(state, ObserveSchedule(schedule.id, None), T0)[1]
    assert step(deleted, CheckTime(), T0 + timedelta(hours=1)) == ([], deleted)


def large_notification(n: int, dataset: str = "clickstream") -> Notification:
    """250 partitions, about 40 KiB: four of them pass a job's budget (bounds.JOB_NOTIFICATIONS_BYTES), three fit."""
    refs = tuple(PartitionRef({"hour": f"{n:02d}", "part": f"{i:03d}"}, f"/data/{dataset}/{n}/{i:03d}/" + "x" * 80)
                 for i in range(250))
    return Notification(f"n-{dataset}-{n}", T0 + timedelta(minutes=n), PartitionCommitted("experiments", dataset, refs))


def folded(state: MatcherState, events) -> MatcherState:
    for event in events:
        state = evolve(state, event)
    return state


def constructed(schedule: Schedule, job_id: str, sequence: int, created_at, notifications, at, logical_time) -> Job:
    context = TriggerContext(schedule.id, schedule.name, dict(schedule.properties), notifications, logical_time)
    return Job(job_id, schedule.id, schedule.generation, schedule.program, context, created_at, schedule.priority,
               schedule.constraints, schedule.timeout_seconds, schedule.timeout_policy, sequence=sequence,
               triggered_at=at, retry_policy=schedule.retry_policy, waiting_job_policy=schedule.waiting_job_policy,
               spark_conf=schedule.spark_conf, max_run_seconds=schedule.max_run_seconds)


def assert_parts(schedule: Schedule, pending, jobs_created: int, fires: list[JobTriggered], sent, at, logical_time):
    """The fire's jobs: the pending job then the schedule's next sequences, each as its constructors build
    it, within the budget, the notifications in arrival order, each in one job."""
    assert len(fires) > 1
    assert [fire.part_of for fire in fires] == ["", *[pending.job_id] * (len(fires) - 1)]
    further = range(jobs_created + 1, jobs_created + len(fires))
    assert [fire.job.sequence for fire in fires] == [pending.sequence, *further]
    for fire in fires:
        job = fire.job
        expected_id = pending.job_id if job.sequence == pending.sequence \
            else derived_id("job", schedule.id, str(job.sequence))
        assert job == constructed(schedule, expected_id, job.sequence, pending.created_at, job.context.notifications,
                                  at, logical_time)
        assert fire.at == at and 1 <= len(job.context.notifications)
        assert bounds.notifications_bytes(job.context.notifications) <= bounds.JOB_NOTIFICATIONS_BYTES
    assert tuple(n for fire in fires for n in fire.job.context.notifications) == tuple(sent)


def test_a_fire_over_the_budget_makes_jobs_that_fit_at_its_moment_and_evolve_folds_them_alike():
    schedule = full_schedule(PartitionTrigger("experiments", "clickstream", 7 * 250))
    state = step(MatcherState(), ObserveSchedule(schedule.id, schedule), T0)[1]
    sent = [large_notification(n) for n in range(7)]
    for notification_ in sent[:6]:
        state = step(state, MatchNotification(notification_), T0)[1]
    pending, at = state.pending, T0 + timedelta(minutes=5)
    events, after = step(state, MatchNotification(sent[6]), at)
    assert after == folded(state, events)
    assert type(events[0]).__name__ == "NotificationMatched"
    assert_parts(schedule, pending, state.jobs_created, events[1:], sent, at, None)
    assert [len(fire.job.context.notifications) for fire in events[1:]] == [3, 3, 1]
    assert after.pending is None and after.jobs_created == events[-1].job.sequence == 3
    # the next job takes the next sequence: no id is used twice
    events, later = step(after, MatchNotification(large_notification(20)), at)
    assert later == folded(after, events) and later.pending.sequence == 4
    assert later.pending.job_id == derived_id("job", schedule.id, "4")
    assert step(later, MatchNotification(sent[6]), at)[0] == []  # a resend of a notification the parts took


@pytest.mark.parametrize("late", [False, True], ids=["on time", "missed"])
def test_a_timer_fire_over_the_budget_makes_jobs_that_fit_the_last_naming_the_next_job(late):
    schedule = full_schedule(OrTrigger((TimeTrigger("0 * * * *"),
                                        PartitionTrigger("experiments", "clickstream", 10**4))))
    state = step(MatcherState(), ObserveSchedule(schedule.id, schedule), T0)[1]
    sent = [large_notification(n) for n in range(5)]
    for notification_ in sent:
        state = step(state, MatchNotification(notification_), T0 + timedelta(minutes=10))[1]
    pending, at = state.pending, T0 + timedelta(hours=3 if late else 1)
    events, after = step(state, CheckTime(), at)
    assert after == folded(state, events)
    fires = [event for event in events if isinstance(event, JobTriggered)]
    logical_time = fires[0].job.context.logical_time
    assert logical_time is not None and all(fire.job.context.logical_time == logical_time for fire in fires)
    assert_parts(schedule, pending, state.jobs_created, fires, sent, at, logical_time)
    assert [fire.next_job_id for fire in fires[:-1]] == [""] * (len(fires) - 1)
    next_id = derived_id("job", schedule.id, str(fires[-1].job.sequence + 1))
    assert fires[-1].next_job_id == after.pending.job_id == next_id
    assert after.pending.sequence == after.jobs_created == fires[-1].job.sequence + 1


def test_a_fire_within_the_budget_is_one_job():
    schedule = full_schedule(PartitionTrigger("experiments", "clickstream", 3 * 250))
    state = step(MatcherState(), ObserveSchedule(schedule.id, schedule), T0)[1]
    for n in range(2):
        state = step(state, MatchNotification(large_notification(n)), T0)[1]
    events, after = step(state, MatchNotification(large_notification(2)), T0)
    [fire] = events
    assert fire.part_of == "" and len(fire.job.context.notifications) == 3 and after.jobs_created == 1
