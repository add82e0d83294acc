"""The constraint-checker's aggregate (`sluice.domain.checking`): pure decide/evolve over the queue."""
from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import datetime, timedelta, timezone

from hypothesis import example, given, settings
from hypothesis import strategies as st

from sluice.domain import checking
from sluice.domain.checking import (
    CheckerState,
    CheckTime,
    EnqueueJob,
    JobAdmitted,
    JobsAdmitted,
    JobDeferred,
    JobQueued,
    JobWithdrawn,
    ObserveRun,
    ObserveSchedule,
    RunObserved,
    ScheduleTracked,
    ScheduleUntracked,
)
from sluice.domain.common import Notification, PartitionCommitted, PartitionRef, ProgramRef, RunStatus
from sluice.domain.constraints import (
    Capacity,
    ConcurrencyConstraint,
    DelayConstraint,
    MaxRunsPerWindowConstraint,
    MinSinceLastRunConstraint,
    TimeWindowConstraint,
)
from sluice.domain.jobs import Job, TriggerContext
from sluice.domain.schedules import Schedule
from sluice.domain.triggers import PartitionTrigger
from sluice.ids import run_id_for

T0 = datetime(2026, 11, 22, tzinfo=timezone.utc)
P = ProgramRef("ns", "app", "p")
Q = ProgramRef("ns", "app", "q")
R = ProgramRef("ns", "app", "r")


def job(sequence: int, *constraints, schedule: str = "s1", program: ProgramRef = P, generation: int = 1,
        priority: int = 0, at: datetime = T0) -> Job:
    return Job(f"{schedule}-j{sequence}", schedule, generation, program, TriggerContext(schedule, schedule), at,
               priority, constraints, sequence=sequence, triggered_at=at)


def schedule(schedule_id: str = "s1", *constraints, program: ProgramRef = P, generation: int = 1,
             enabled: bool = True) -> Schedule:
    return Schedule(schedule_id, schedule_id, program, PartitionTrigger("ns", "d"), enabled=enabled,
                    generation=generation, constraints=constraints)


def run(state: CheckerState, command: object, now: datetime = T0, capacity: Capacity = Capacity()):
    events = checking.decide(state, command, now, capacity)
    return checking.fold(state, events), events


def kinds(events) -> list[str]:
    return [type(e).__name__ for e in events]


def test_a_job_without_constraints_is_queued_and_admitted_in_one_decision():
    state, events = run(CheckerState(), EnqueueJob(job(1)))
    assert kinds(events) == ["JobsAdmitted"]  # admitted on arrival: one event queues and admits it
    assert not state.queue and state.world.runs == {}  # no constraint counts P's runs: none kept
    assert run(state, ObserveRun(P, run_id_for("s1-j1"), RunStatus.COMPLETED, T0))[1] == []


def test_runs_are_kept_for_programs_a_constraint_counts_and_for_all_under_a_load_limit():
    state, _ = run(CheckerState(), EnqueueJob(job(1, ConcurrencyConstraint(2))))
    assert state.world.runs[P][0].run_id == run_id_for("s1-j1") and state.world.running(P) == 1
    assert run(state, ObserveRun(Q, "q-run", RunStatus.RUNNING, T0))[1] == []
    state, events = run(state, ObserveRun(Q, "q-run", RunStatus.RUNNING, T0), capacity=Capacity(limit=5))
    assert kinds(events) == ["LoadLimited", "RunObserved"] and state.world.running(Q) == 1
    assert kinds(run(state, CheckTime(), capacity=Capacity(limit=5))[1]) == []


def test_a_redelivered_job_changes_nothing_even_after_its_run_ended():
    state, _ = run(CheckerState(), EnqueueJob(job(1, ConcurrencyConstraint(1))))
    state, _ = run(state, ObserveRun(P, run_id_for("s1-j1"), RunStatus.COMPLETED, T0))
    assert run(state, EnqueueJob(job(1)))[1] == []
    assert kinds(run(state, EnqueueJob(job(2)))[1]) == ["JobsAdmitted"]


def test_a_job_dead_lettered_and_replayed_after_later_ones_is_queued_once():
    """The checker dead-lettered job 1 (a bug, fixed since), handled job 2, then an operator replayed job 1:
    by its sequence it would pass for a redelivery. A replay of a job still queued is one."""
    state, _ = run(CheckerState(), EnqueueJob(job(2)))
    assert run(state, EnqueueJob(job(1)))[1] == []
    state, events = run(state, EnqueueJob(job(1), replayed=True))
    assert kinds(events) == ["JobsAdmitted"] and [j.id for j in checking.admitted_jobs(events)] == ["s1-j1"]
    assert state.schedules["s1"].last_sequence == 2

    state, _ = run(state, EnqueueJob(job(4, DelayConstraint(60))))
    assert "s1-j4" in state.queue
    assert run(state, EnqueueJob(job(4, DelayConstraint(60)), replayed=True))[1] == []
    mixed = checking.decide_admitting(state, [EnqueueJob(job(3), replayed=True), EnqueueJob(job(1, schedule="s2"))],
                                      T0, settled=checking.Settled(None))[0]
    assert sorted(j.id for j in checking.admitted_jobs(mixed)) == ["s1-j3", "s2-j1"]


def test_jobs_of_one_pass_are_admitted_in_sequence_order_and_a_redelivery_of_the_higher_one_is_a_no_op():
    """One schedule's jobs triggered at one instant are admitted in sequence order, not job id order
    ("s1-j10" < "s1-j9"). A redelivered job 10 (the matcher's relay publishes at least once) must be
    recognised, also in the state folded from the recorded events."""
    events = checking.decide_admitting(CheckerState(), [EnqueueJob(job(9)), EnqueueJob(job(10))], T0)[0]
    assert [job.sequence for job in checking.admitted_jobs(events)] == [9, 10] and len(events) == 1
    folded = checking.fold(CheckerState(), events)
    assert folded.schedules["s1"].last_sequence == 10
    assert run(folded, EnqueueJob(job(10)))[1] == []
    assert kinds(run(folded, EnqueueJob(job(11)))[1]) == ["JobsAdmitted"]


def test_a_waiting_job_is_deferred_once_and_admitted_when_its_delay_ends():
    state, events = run(CheckerState(), EnqueueJob(job(1, DelayConstraint(60))))
    assert kinds(events) == ["JobQueued", "JobDeferred"]
    assert events[1].waiting_on == ("delayed 60 s after the trigger",)
    assert checking.next_check(state, T0).wake_at == T0 + timedelta(seconds=60)
    assert run(state, CheckTime(), T0 + timedelta(seconds=30))[1] == []  # not due: nothing recorded
    state, events = run(state, CheckTime(), T0 + timedelta(seconds=60))
    assert kinds(events) == ["JobsAdmitted"] and not state.queue


def test_concurrency_slot_is_taken_by_one_job_and_freed_by_the_run_end():
    one = ConcurrencyConstraint(1)
    state, _ = run(CheckerState(), EnqueueJob(job(1, one)))
    state, events = run(state, EnqueueJob(job(2, one)))
    assert kinds(events) == ["JobQueued", "JobDeferred"]
    assert checking.next_check(state, T0).wake_at is None  # only a run end can free the slot
    state, events = run(state, ObserveRun(P, run_id_for("s1-j1"), RunStatus.FAILED, T0 + timedelta(minutes=1)))
    assert kinds(events) == ["RunObserved", "JobsAdmitted"] and events[1].jobs[0].id == "s1-j2"


def test_an_unchanged_run_status_is_not_recorded_again():
    state, _ = run(CheckerState(), EnqueueJob(job(1, ConcurrencyConstraint(3))))
    assert run(state, ObserveRun(P, run_id_for("s1-j1"), RunStatus.STARTING, T0))[1] == []


def test_a_newer_generation_withdraws_older_jobs_but_keeps_its_own():
    state, _ = run(CheckerState(), ObserveSchedule("s1", schedule("s1", DelayConstraint(600))))
    state, _ = run(state, EnqueueJob(job(1, DelayConstraint(600))))
    state, _ = run(state, EnqueueJob(job(2, DelayConstraint(600), generation=2)))  # arrived before the update
    state, events = run(state, ObserveSchedule("s1", schedule("s1", DelayConstraint(600), generation=2)))
    assert [(type(e).__name__, getattr(e, "job_id", None)) for e in events] == [
        ("JobWithdrawn", "s1-j1"), ("ScheduleTracked", None)]
    assert list(state.queue) == ["s1-j2"]
    assert run(state, ObserveSchedule("s1", schedule("s1", generation=1)))[1] == []  # a stale change


def test_disable_and_delete_withdraw_and_late_jobs_are_discarded_on_arrival():
    state, _ = run(CheckerState(), ObserveSchedule("s1", schedule("s1")))
    state, _ = run(state, EnqueueJob(job(1, DelayConstraint(60))))
    state, events = run(state, ObserveSchedule("s1", schedule("s1", enabled=False)))
    assert [e.reason for e in events if isinstance(e, JobWithdrawn)] == ["schedule disabled"]
    state, events = run(state, EnqueueJob(job(2)))
    assert kinds(events) == ["JobQueued", "JobWithdrawn"] and events[1].reason == "schedule disabled"
    state, events = run(state, ObserveSchedule("s1", None))
    assert kinds(events) == ["ScheduleUntracked"]
    state, events = run(state, EnqueueJob(job(3)))
    assert events[-1] == JobWithdrawn("s1-j3", "s1", "schedule deleted", T0)


def test_groups_follow_the_schedules_and_count_across_programs():
    group = ConcurrencyConstraint(1, group="g")
    state, _ = run(CheckerState(), ObserveSchedule("s1", schedule("s1", group, program=P)))
    state, _ = run(state, ObserveSchedule("s2", schedule("s2", group, program=Q)))
    assert state.world.members("g") == {P, Q}
    state, _ = run(state, EnqueueJob(job(1, group, program=P)))
    state, events = run(state, EnqueueJob(job(1, group, schedule="s2", program=Q)))
    assert kinds(events) == ["JobQueued", "JobDeferred"]
    state, _ = run(state, ObserveSchedule("s1", schedule("s1", program=P, generation=2)))  # s1 leaves g
    assert state.world.members("g") == {Q}
    state, _ = run(state, ObserveSchedule("s2", None))
    assert state.world.members("g") == frozenset() and state.group_refs == {}


def test_ended_runs_are_forgotten_beyond_what_the_constraints_need():
    gap = MinSinceLastRunConstraint(3600)
    state, _ = run(CheckerState(), EnqueueJob(job(1, gap)))
    state, _ = run(state, ObserveRun(P, run_id_for("s1-j1"), RunStatus.COMPLETED, T0 + timedelta(minutes=5)))
    assert state.world.last_start(P) == T0 and state.horizon == timedelta(hours=1)
    later = T0 + timedelta(hours=2)
    state, _ = run(state, ObserveRun(P, "other", RunStatus.STARTING, later))
    state, _ = run(state, ObserveRun(P, "other", RunStatus.COMPLETED, later))
    assert [r.run_id for r in state.world.runs[P]] == ["other"]


def test_high_priority_passes_the_soft_load_limit():
    capacity = Capacity(limit=1, high_priority=5)
    state, events = run(CheckerState(), EnqueueJob(job(1)), capacity=capacity)
    assert kinds(events) == ["LoadLimited", "JobsAdmitted"]
    state, events = run(state, EnqueueJob(job(1, schedule="low")), capacity=capacity)
    assert kinds(events) == ["JobQueued", "JobDeferred"]
    state, events = run(state, EnqueueJob(job(1, schedule="high", priority=5)), capacity=capacity)
    assert kinds(events) == ["JobsAdmitted"]


def test_replaying_the_events_gives_the_same_state():
    state, history = CheckerState(), []
    for command, now in [(ObserveSchedule("s1", schedule("s1", ConcurrencyConstraint(1, group="g"))), T0),
                         (EnqueueJob(job(1, ConcurrencyConstraint(1, group="g"))), T0),
                         (EnqueueJob(job(2, ConcurrencyConstraint(1, group="g"))), T0),
                         (ObserveRun(P, run_id_for("s1-j1"), RunStatus.COMPLETED, T0 + timedelta(minutes=1)),
                          T0 + timedelta(minutes=1))]:
        state, events = run(state, command, now)
        history += events
    assert checking.fold(CheckerState(), history) == state
    assert {type(e) for e in history} >= {ScheduleTracked, JobQueued, JobDeferred, JobsAdmitted, RunObserved}
    assert not any(isinstance(e, ScheduleUntracked) for e in history)
    assert replace(state, queue={}) == state  # everything was admitted


def test_a_queued_job_leaves_the_state_before_it_unchanged():
    """The schedules map is persistent: evolving records the sequence in a new map, sharing the rest."""
    before = CheckerState(schedules={f"s{i}": checking.TrackedSchedule(P, 1, True) for i in range(1, 1000)})
    after, _ = run(before, EnqueueJob(job(7)))
    assert after.schedules["s1"].last_sequence == 7
    assert before.schedules["s1"].last_sequence == 0
    assert len(after.schedules) == len(before.schedules) == 999


def test_a_pass_admitting_many_jobs_writes_them_in_order_in_events_of_bounded_weight():
    many = [job(sequence, schedule=f"s{sequence}") for sequence in range(1, 1201)]
    notifications = tuple(Notification(f"n{i}", T0, PartitionCommitted("ns", "d", (PartitionRef({"i": str(i)}, "/d"),)))
                          for i in range(600))
    heavy = replace(job(1201, schedule="heavy"), context=TriggerContext("heavy", "heavy", notifications=notifications))
    events = checking.admitted_events([*many, heavy], T0, {"s7-j7", heavy.id})
    assert [len(event.jobs) for event in events] == [500, 500, 200, 1]
    assert checking.admitted_jobs(events) == [*many, heavy]
    assert [event.forced for event in events] == [("s7-j7",), (), (), (heavy.id,)]


def test_admitted_on_arrival_folds_to_what_queued_then_admitted_folds_to():
    """A job admitted with no JobQueued before it: the JobsAdmitted stands for both (the log of earlier
    versions has both), and folds as the JobAdmitted of earlier versions did."""
    state, _ = run(CheckerState(), ObserveSchedule("s1", schedule("s1", ConcurrencyConstraint(2, group="g"))))
    state, events = run(state, EnqueueJob(job(1, ConcurrencyConstraint(2, group="g"))))
    [admitted] = events
    assert isinstance(admitted, JobsAdmitted)
    [fired] = admitted.jobs
    assert checking.fold(state, events) == checking.fold(state, [JobQueued(fired, admitted.at), admitted])
    assert checking.fold(state, events) == checking.fold(state, [JobAdmitted(fired, admitted.at)])
    assert run(checking.fold(state, events), EnqueueJob(job(1, ConcurrencyConstraint(2, group="g"))))[1] == []



def test_a_group_slot_stays_taken_when_the_jobs_arrive_before_their_schedules_are_tracked():
    """The admitted job's program belongs to the group its constraint names while its run goes,
    also with no ScheduleTracked yet to say so: a later pass does not admit a second job of the group."""
    group = ConcurrencyConstraint(1, group="g")
    state, events = run(CheckerState(), EnqueueJob(job(1, group, schedule="a", program=P)))
    assert kinds(events) == ["JobsAdmitted"]
    state, events = run(state, EnqueueJob(job(1, group, schedule="b", program=Q)))
    assert kinds(events) == ["JobQueued", "JobDeferred"]
    assert run(state, CheckTime(), T0 + timedelta(minutes=5))[1] == []
    state, events = run(state, ObserveRun(P, run_id_for("a-j1"), RunStatus.COMPLETED, T0 + timedelta(minutes=6)))
    assert kinds(events) == ["RunObserved", "JobsAdmitted"] and events[1].jobs[0].id == "b-j1"

CONSTRAINTS = st.lists(st.sampled_from([
    ConcurrencyConstraint(1), ConcurrencyConstraint(2), ConcurrencyConstraint(1, group="g"),
    DelayConstraint(30), DelayConstraint(90), MinSinceLastRunConstraint(60),
    TimeWindowConstraint("00:01", "00:03", "UTC"), TimeWindowConstraint("23:00", "01:00", "Europe/Paris"),
]), max_size=3, unique=True)
ARRIVALS = st.lists(st.tuples(st.sampled_from([P, Q]), CONSTRAINTS, st.integers(0, 2), st.integers(0, 150)),
                    min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(arrivals=ARRIVALS, batch=st.integers(1, 4), ended=st.lists(st.integers(0, 11), max_size=4))
def test_one_admission_pass_gives_the_timer_no_later_than_a_second_pass_over_the_queue_it_left(arrivals, batch, ended):
    """The checker sets its timer from the pass that decided (`decide_admitting`), not from a second
    pass over the state the decision leads to: that pass would launch or discard nothing, and wait
    on the same jobs until no earlier than the first said."""
    state, now = CheckerState(), T0
    jobs = [job(index + 1, *constraints, program=program, priority=priority, schedule=f"s{index}")
            for index, (program, constraints, priority, _) in enumerate(arrivals)]
    commands = [EnqueueJob(queued) for queued in jobs]
    commands += [ObserveRun(jobs[i].program, run_id_for(jobs[i].id), RunStatus.COMPLETED, T0)
                 for i in ended if i < len(jobs)]
    for start, (*_, seconds) in zip(range(0, len(commands), batch), arrivals):
        now = now + timedelta(seconds=seconds)
        for step in ([CheckTime()], commands[start:start + batch]):
            events, settled = checking.decide_admitting(state, step, now)
            assert events == checking.decide_admitting(state, step, now, settled=None)[0]
            state = checking.fold(state, events)
            if settled is None:
                continue
            again = checking.next_check(state, now)
            assert again.launch == () and again.discard == ()
            assert {w.job_id for w in again.waiting} == set(state.queue)
            if settled.until is None:
                assert again.wake_at is None
            else:
                assert again.wake_at is None or settled.until <= again.wake_at


RUN_CONSTRAINTS = st.lists(st.sampled_from([
    ConcurrencyConstraint(1), ConcurrencyConstraint(2), ConcurrencyConstraint(1, group="g"),
    ConcurrencyConstraint(2, group="g"), MinSinceLastRunConstraint(60), MaxRunsPerWindowConstraint(1, "hour"),
    DelayConstraint(30), TimeWindowConstraint("00:01", "00:03", "UTC"),
]), max_size=2, unique=True)
"""Mostly constraints that count runs: the jobs a run concerns."""
RUNS = st.lists(st.tuples(st.integers(0, 11), st.sampled_from([P, Q, R]), st.booleans(),
                          st.sampled_from([RunStatus.RUNNING, RunStatus.COMPLETED, RunStatus.FAILED]), st.booleans()),
                max_size=6)
"""(which run, its program if not a job's, a run the checker admitted or another, status, a step of
its own or with the next arrivals)."""


@settings(max_examples=400, deadline=None)
@given(arrivals=st.lists(st.tuples(st.sampled_from([P, Q, R]), RUN_CONSTRAINTS, st.integers(0, 2), st.integers(0, 150)),
                        min_size=1, max_size=12),
       batch=st.integers(1, 4), runs=RUNS, late=st.lists(st.booleans(), max_size=16),
       capacity=st.sampled_from([Capacity(), Capacity(limit=2), Capacity(limit=1, hard_limit=3)]))
@example(arrivals=[(P, (ConcurrencyConstraint(1, group="g"),), 0, 0),
                   (Q, (ConcurrencyConstraint(1, group="g"),), 0, 0)],
         batch=2, runs=[(0, R, True, RunStatus.COMPLETED, True)], late=[], capacity=Capacity())  # rare at random
def test_a_pass_over_the_jobs_a_batch_concerns_decides_what_a_pass_over_the_whole_queue_decides(
        arrivals, batch, runs, late, capacity):
    """The checker checks arriving jobs, and the jobs of programs whose runs changed (with their
    groups' members), alone while what the earlier passes settled holds (`Settled`): the same
    events as a checker that always passes over the whole queue, its timer firing at the `until`
    it keeps, or late (jobs arrive first). Runs of admitted jobs and others start and end; under a
    load limit a run concerns every job."""
    jobs = [job(index + 1, *constraints, program=program, priority=priority, schedule=f"s{index}")
            for index, (program, constraints, priority, _) in enumerate(arrivals)]
    steps: list[list] = [[EnqueueJob(queued) for queued in jobs[start:start + batch]]
                         for start in range(0, len(jobs), batch)]
    for position, run_ in enumerate(runs):  # a run is chosen when its step comes, among the jobs admitted by then
        at = min(position + 1, len(steps))
        if run_[-1] or at == len(steps):
            steps.insert(at, [run_])
        else:
            steps[at] = [run_, *steps[at]]
    whole = partial = CheckerState()
    settled, now, admitted = None, T0, []
    for index, (step, (*_, seconds)) in enumerate(zip(steps, itertools.cycle(arrivals))):
        now += timedelta(seconds=seconds)
        step = [_observed(command, admitted) if isinstance(command, tuple) else command for command in step]
        due = settled is not None and settled.until is not None and settled.until <= now
        due = due and not (index < len(late) and late[index])
        for commands in ([CheckTime()], step) if due else (step,):
            expected = checking.decide_admitting(whole, commands, now, capacity)[0]  # a full pass
            events, after = checking.decide_admitting(partial, commands, now, capacity, settled=settled)
            assert events == expected
            whole, partial = checking.fold(whole, expected), checking.fold(partial, events)
            admitted += checking.admitted_jobs(events)
            by_program: dict = {}
            for job_id, queued in partial.queue.items():
                by_program.setdefault(queued.job.program, set()).add(job_id)
            assert {program: set(ids) for program, ids in partial.queued_by_program.items()} == by_program
            settled = after or settled
            full = checking.next_check(partial, now, capacity).wake_at  # the timer a full pass would set
            assert full is None or (settled.until is not None and settled.until <= full)


def _observed(run_: tuple, admitted: list[Job]) -> ObserveRun:
    index, program, of_admitted, status, _ = run_
    if of_admitted and admitted:
        ran = admitted[index % len(admitted)]
        return ObserveRun(ran.program, run_id_for(ran.id), status, T0)
    return ObserveRun(program, f"elsewhere-{index}", status, T0)
