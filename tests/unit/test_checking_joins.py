"""Later fires join a waiting job (`sluice.domain.checking`, WaitingJobPolicy.JOIN): seed 000's job
queue adds a notification to the schedule's job unless that job is already PENDING_LAUNCH."""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

from sluice.domain import bounds, checking
from sluice.domain.checking import (
    CheckerState,
    CheckTime,
    EnqueueJob,
    NotificationsJoined,
    ObserveRun,
    ObserveSchedule,
)
from sluice.domain.common import Notification, PartitionCommitted, PartitionRef, ProgramRef, RunStatus
from sluice.domain.constraints import ConcurrencyConstraint, DelayConstraint, MinSinceLastRunConstraint
from sluice.domain.jobs import Job, TriggerContext, WaitingJobPolicy
from sluice.domain.schedules import Schedule
from sluice.domain.triggers import PartitionTrigger
from sluice.ids import run_id_for

T0 = datetime(2026, 11, 22, tzinfo=timezone.utc)
P = ProgramRef("ns", "app", "p")
ONE_AT_A_TIME = ConcurrencyConstraint(1)


def partition(hour: int) -> Notification:
    return Notification(f"n{hour}", T0, PartitionCommitted("ns", "feed", (PartitionRef({"hour": f"{hour:02d}"},
                                                                                      f"/feed/{hour}"),)))


def job(sequence: int, *constraints, schedule: str = "s1", generation: int = 1, at: datetime = T0,
        policy: WaitingJobPolicy = WaitingJobPolicy.JOIN, logical_time: datetime | None = None) -> Job:
    context = TriggerContext(schedule, schedule, notifications=(partition(sequence),), logical_time=logical_time)
    return Job(f"{schedule}-j{sequence}", schedule, generation, P, context, at, 0, constraints, sequence=sequence,
               triggered_at=at, waiting_job_policy=policy)


def run(state: CheckerState, *commands, now: datetime = T0):
    events, _ = checking.decide_admitting(state, list(commands), now)
    return checking.fold(state, events), events


def kinds(events) -> list[str]:
    return [type(e).__name__ for e in events]


def hours_of(job_: Job) -> list[str]:
    return [p.key["hour"] for _, _, p in job_.context.partitions()]


def running_first() -> CheckerState:
    """Job 1 of s1 admitted (its run going); job 2 waiting behind it on the concurrency limit."""
    state, _ = run(CheckerState(), EnqueueJob(job(1, ONE_AT_A_TIME)))
    state, events = run(state, EnqueueJob(job(2, ONE_AT_A_TIME)))
    assert kinds(events) == ["JobQueued", "JobDeferred"]
    return state


def test_a_fire_while_a_job_waits_joins_it_and_the_one_run_gets_every_notification():
    state = running_first()
    state, events = run(state, EnqueueJob(job(3, ONE_AT_A_TIME)))
    assert events == [NotificationsJoined("s1-j3", "s1-j2", "s1", 3, (partition(3),), T0)]
    state, events = run(state, EnqueueJob(job(4, ONE_AT_A_TIME)))
    assert kinds(events) == ["NotificationsJoined"] and list(state.queue) == ["s1-j2"]
    state, events = run(state, ObserveRun(P, run_id_for("s1-j1"), RunStatus.COMPLETED, T0))
    (admitted,) = checking.admitted_jobs(events)
    assert admitted.id == "s1-j2" and hours_of(admitted) == ["02", "03", "04"]
    assert not state.queue and not state.joinable


def test_a_job_already_admitted_is_never_joined():
    state, events = run(CheckerState(), EnqueueJob(job(1, ONE_AT_A_TIME)))
    assert kinds(events) == ["JobsAdmitted"]
    state, events = run(state, EnqueueJob(job(2, ONE_AT_A_TIME)))
    assert kinds(events) == ["JobQueued", "JobDeferred"]  # waits as a job of its own: job 1 is PENDING_LAUNCH
    assert hours_of(state.queue["s1-j2"].job) == ["02"]


def test_arrivals_in_one_batch_join_as_they_would_one_by_one():
    batched, events = run(running_first(), EnqueueJob(job(3, ONE_AT_A_TIME)), EnqueueJob(job(4, ONE_AT_A_TIME)))
    assert kinds(events) == ["NotificationsJoined", "NotificationsJoined"]
    alone, _ = run(running_first(), EnqueueJob(job(3, ONE_AT_A_TIME)))
    alone, _ = run(alone, EnqueueJob(job(4, ONE_AT_A_TIME)))
    assert batched == alone
    # jobs that arrive together and all wait: the oldest waits, the later ones join it in the same pass
    state, _ = run(CheckerState(), EnqueueJob(job(1, DelayConstraint(60))))
    state, events = run(state, EnqueueJob(job(2, DelayConstraint(60), at=T0 + timedelta(seconds=1))),
                        EnqueueJob(job(3, DelayConstraint(60), at=T0 + timedelta(seconds=2))))
    assert kinds(events) == ["NotificationsJoined", "NotificationsJoined"]
    assert hours_of(state.queue["s1-j1"].job) == ["01", "02", "03"]
    fresh, events = run(CheckerState(), *(EnqueueJob(job(n, DelayConstraint(60))) for n in (1, 2, 3)))
    assert kinds(events) == ["JobQueued", "JobDeferred", "NotificationsJoined", "NotificationsJoined"]
    assert list(fresh.queue) == ["s1-j1"] and hours_of(fresh.queue["s1-j1"].job) == ["01", "02", "03"]


def test_a_joined_job_delivered_again_is_ignored():
    state, _ = run(running_first(), EnqueueJob(job(3, ONE_AT_A_TIME)))
    again, events = run(state, EnqueueJob(job(3, ONE_AT_A_TIME)))
    assert events == [] and again == state


def test_separate_jobs_time_fired_jobs_and_other_generations_never_join():
    separate = WaitingJobPolicy.SEPARATE
    state, _ = run(CheckerState(), EnqueueJob(job(1, ONE_AT_A_TIME, policy=separate)))
    state, _ = run(state, EnqueueJob(job(2, ONE_AT_A_TIME, policy=separate)))
    state, events = run(state, EnqueueJob(job(3, ONE_AT_A_TIME, policy=separate)))
    assert kinds(events) == ["JobQueued", "JobDeferred"] and len(state.queue) == 2

    cron = T0 - timedelta(hours=1)
    state, _ = run(running_first(), EnqueueJob(job(3, ONE_AT_A_TIME, logical_time=cron)))
    assert len(state.queue) == 2  # stands for its own logical time
    state, events = run(running_first(), EnqueueJob(job(3, ONE_AT_A_TIME, generation=2)))
    assert kinds(events) == ["JobQueued", "JobDeferred"]


def test_a_fire_after_the_waiting_job_left_waits_and_is_joined_in_turn():
    state = running_first()
    state, _ = run(state, ObserveRun(P, run_id_for("s1-j1"), RunStatus.COMPLETED, T0))  # job 2 admitted
    state, events = run(state, EnqueueJob(job(3, ONE_AT_A_TIME)))
    assert kinds(events) == ["JobQueued", "JobDeferred"] and dict(state.joinable) == {"s1": "s1-j3"}
    state, events = run(state, EnqueueJob(job(4, ONE_AT_A_TIME)))
    assert events[0].into == "s1-j3"


def test_a_withdrawn_waiting_job_is_no_longer_joined():
    state = running_first()
    updated = Schedule("s1", "s1", P, PartitionTrigger("ns", "feed"), enabled=True, generation=2,
                       constraints=(ONE_AT_A_TIME,))
    state, events = run(state, ObserveSchedule("s1", updated))
    assert "JobWithdrawn" in kinds(events) and not state.joinable
    state, events = run(state, EnqueueJob(job(3, ONE_AT_A_TIME, generation=2)))
    assert "NotificationsJoined" not in kinds(events)


def test_seed_scenario_1_five_partitions_within_the_interval_make_two_runs():
    """Any new partition, 5 minutes at least between runs, five partitions over five minutes: the
    first runs at once, the other four wait in one job and run together when the interval ends."""
    interval = MinSinceLastRunConstraint(300)
    state, launched = CheckerState(), []
    for minute in range(5):
        now = T0 + timedelta(minutes=minute)
        state, events = run(state, EnqueueJob(job(minute + 1, interval, at=now)), now=now)
        launched += checking.admitted_jobs(events)
    state, events = run(state, CheckTime(), now=T0 + timedelta(minutes=5))
    launched += checking.admitted_jobs(events)
    assert [hours_of(j) for j in launched] == [["01"], ["02", "03", "04", "05"]]
    assert not state.queue


def test_replaying_the_events_rebuilds_the_same_queue():
    state, history = CheckerState(), []
    for command in (EnqueueJob(job(1, ONE_AT_A_TIME)), EnqueueJob(job(2, ONE_AT_A_TIME)),
                    EnqueueJob(job(3, ONE_AT_A_TIME)), EnqueueJob(replace(job(4, ONE_AT_A_TIME)))):
        state, events = run(state, command)
        history += events
    assert checking.fold(CheckerState(), history) == state
    assert hours_of(state.queue["s1-j2"].job) == ["02", "03", "04"]


def large(sequence: int) -> Job:
    """A job of 250 partitions, about 40 KiB of notifications: three fit one job (bounds.JOB_NOTIFICATIONS_BYTES)."""
    refs = tuple(PartitionRef({"hour": f"{sequence:02d}", "part": f"{i:03d}"}, f"/feed/{sequence}/{i:03d}/" + "x" * 80)
                 for i in range(250))
    notification = Notification(f"n{sequence}", T0, PartitionCommitted("ns", "feed", refs))
    return replace(job(sequence, ONE_AT_A_TIME), context=TriggerContext("s1", "s1", notifications=(notification,)))


def test_a_fire_joins_a_waiting_job_only_while_their_notifications_fit_one_job_else_waits_apart():
    state, _ = run(CheckerState(), EnqueueJob(large(1)))
    state, events = run(state, EnqueueJob(large(2)), EnqueueJob(large(3)), EnqueueJob(large(4)))
    assert kinds(events) == ["JobQueued", "JobDeferred", "NotificationsJoined", "NotificationsJoined"]
    assert bounds.notifications_bytes(state.queue["s1-j2"].job.context.notifications) <= bounds.JOB_NOTIFICATIONS_BYTES
    state, events = run(state, EnqueueJob(large(5)))
    assert kinds(events) == ["JobQueued", "JobDeferred"]  # job 2 full: job 5 waits as a job of its own
    state, events = run(state, EnqueueJob(large(6)))
    assert kinds(events) == ["JobQueued", "JobDeferred"] and sorted(state.queue) == ["s1-j2", "s1-j5", "s1-j6"]
    runs = []
    for finished in ("s1-j1", "s1-j2", "s1-j5"):
        state, events = run(state, ObserveRun(P, run_id_for(finished), RunStatus.COMPLETED, T0))
        runs += [hours_of(admitted) for admitted in checking.admitted_jobs(events)]
    assert [sorted(set(hours)) for hours in runs] == [["02", "03", "04"], ["05"], ["06"]]
    assert not state.queue


def test_a_small_fire_still_joins_a_waiting_job_with_room():
    state, _ = run(CheckerState(), EnqueueJob(large(1)))
    state, _ = run(state, EnqueueJob(large(2)), EnqueueJob(large(3)), EnqueueJob(large(4)))
    state, events = run(state, EnqueueJob(job(5, ONE_AT_A_TIME)))  # one small partition still fits
    assert kinds(events) == ["NotificationsJoined"] and events[0].into == "s1-j2"
