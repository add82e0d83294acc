"""The matcher's direct paths give what the generic ones give: a fired job equals the one its
constructors build, and a timer's check (`step(CheckTime)`) the state its events fold to."""
import dataclasses
from datetime import datetime, timedelta, timezone

import pytest

from sluice.domain import triggers
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
