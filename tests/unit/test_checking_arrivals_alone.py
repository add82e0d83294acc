"""A poll of arriving jobs of distinct schedules, before what the earlier passes settled falls due,
is decided without queueing the jobs it admits (`checking._admitting_arrivals`): the same events as
the general path and as a full pass over the queue, on random queues and arrivals."""
from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta

import pytest

from sluice.domain import checking
from sluice.domain.checking import CheckerState, EnqueueJob, ObserveRun, ObserveSchedule
from sluice.domain.common import Notification, ProgramRef, ProgramStatusChanged, RunStatus
from sluice.domain.constraints import ConcurrencyConstraint, DelayConstraint, NotMetPolicy, TimeWindowConstraint
from sluice.domain.jobs import Job, TriggerContext, WaitingJobPolicy
from sluice.ids import run_id_for
from tests.unit.test_checking import T0, schedule

PROGRAMS = [ProgramRef("ns", "app", name) for name in "pqr"]
UNWATCHED = ProgramRef("ns", "app", "never-counted")


def constraints(rng: random.Random) -> tuple:
    return tuple(rng.sample([ConcurrencyConstraint(1), ConcurrencyConstraint(2, group="g"), DelayConstraint(60),
                             DelayConstraint(30), DelayConstraint(5, NotMetPolicy.ABORT),
                             TimeWindowConstraint("06:00", "22:00")], rng.randrange(3)))


def fired(rng: random.Random, schedule_id: str, sequence: int, program: ProgramRef, generation: int) -> Job:
    notification = Notification(f"n-{schedule_id}-{sequence}", T0, ProgramStatusChanged(program, "r", RunStatus.COMPLETED))
    context = TriggerContext(schedule_id, schedule_id, notifications=(notification,),
                             logical_time=rng.choice([None, None, None, T0]))
    return Job(f"{schedule_id}-j{sequence}", schedule_id, generation, program, context, T0, rng.randrange(2),
               constraints(rng), rng.choice([0, 30]), sequence=sequence, triggered_at=T0,
               waiting_job_policy=rng.choice([WaitingJobPolicy.JOIN, WaitingJobPolicy.JOIN, WaitingJobPolicy.SEPARATE]))


def scenario(seed: int) -> tuple[CheckerState, checking.Settled, list[EnqueueJob]]:
    """A queue left by full passes (tracked schedules, waiting jobs, a running job), what its last
    pass settled, and a poll of arrivals of distinct schedules (new, redelivered, stale, disabled)."""
    rng = random.Random(seed)
    state, sequences, generations, programs = CheckerState(), {}, {}, {}
    for index in range(6):
        schedule_id, program = f"s{index}", rng.choice(PROGRAMS)
        programs[schedule_id], sequences[schedule_id] = program, 0
        generations[schedule_id] = rng.choice([1, 2])
        if rng.random() < 0.8:
            tracked = schedule(schedule_id, *constraints(rng), program=program, generation=generations[schedule_id],
                               enabled=rng.random() < 0.8)
            state = checking.fold(state, checking.decide(state, ObserveSchedule(schedule_id, tracked), T0))
    settled = None
    for _ in range(rng.randrange(2, 8)):
        schedule_id = rng.choice(sorted(sequences))
        sequences[schedule_id] += 1
        commands = [EnqueueJob(fired(rng, schedule_id, sequences[schedule_id], programs[schedule_id],
                                     generations[schedule_id]))]
        if rng.random() < 0.3:
            commands.append(ObserveRun(rng.choice(PROGRAMS), run_id_for("elsewhere"), RunStatus.RUNNING, T0))
        events, settled = checking.decide_admitting(state, commands, T0, settled=None)
        state = checking.fold(state, events)
    arrivals = []
    for schedule_id in rng.sample(sorted(sequences), rng.randrange(1, 6)):
        sequences[schedule_id] += rng.choice([0, 1, 1, 1])  # 0: the last job redelivered
        generation = generations[schedule_id] - rng.choice([0, 0, 1])
        arrivals.append(EnqueueJob(fired(rng, schedule_id, max(1, sequences[schedule_id]), programs[schedule_id],
                                         generation)))
    if rng.random() < 0.2:
        arrivals.append(EnqueueJob(fired(rng, "never-tracked", 1, rng.choice(PROGRAMS), 1)))
    return state, settled, arrivals


@pytest.mark.parametrize("seed", range(300))
def test_arrivals_alone_decide_what_the_general_path_and_a_full_pass_decide(seed):
    state, settled, arrivals = scenario(seed)
    now = T0 + timedelta(seconds=1)
    alone, alone_settled = checking.decide_admitting(state, arrivals, now, settled=settled)
    # a run of a program no constraint counts changes nothing, but takes the general path
    general, general_settled = checking.decide_admitting(
        state, [*arrivals, ObserveRun(UNWATCHED, run_id_for("x"), RunStatus.RUNNING, now)], now, settled=settled)
    full, _ = checking.decide_admitting(state, arrivals, now, settled=None)
    assert alone == general == full
    assert alone_settled == general_settled
    assert checking.fold(state, alone) == checking.fold(state, full)


def test_a_poll_with_two_jobs_of_one_schedule_takes_the_general_path():
    rng = random.Random(7)
    jobs = [EnqueueJob(fired(rng, "s1", sequence, PROGRAMS[0], 1)) for sequence in (1, 2)]
    assert not checking._apart(jobs) and checking._apart(jobs[:1])


def one_by_one(state: CheckerState, events: list) -> CheckerState:
    """evolve of each event, a JobsAdmitted as the JobAdmitted of each of its jobs alone (earlier logs')."""
    for event in events:
        if isinstance(event, checking.JobsAdmitted):
            for job in event.jobs:
                state = checking.evolve(state, checking.JobAdmitted(job, event.at, job.id in event.forced))
        else:
            state = checking.evolve(state, event)
    return state


@pytest.mark.parametrize("seed", range(100))
def test_fold_of_a_burst_admitted_on_arrival_is_evolve_one_event_at_a_time(seed):
    """A JobsAdmitted takes a run of jobs admitted on arrival that only mark their schedules seen in one
    edit: the same state as evolving each job's admission alone, whatever else the queue holds, watches
    or tracks."""
    rng = random.Random(seed)
    state, settled, arrivals = scenario(seed)
    unconstrained = [EnqueueJob(replace(fired(rng, f"burst-{index}", rng.randrange(1, 3),
                                              rng.choice([UNWATCHED, *PROGRAMS]), 1), constraints=()))
                     for index in range(rng.randrange(1, 12))]
    commands = rng.sample([*arrivals, *unconstrained], len(arrivals) + len(unconstrained))
    now = T0 + timedelta(seconds=1)
    for commands_now in (commands, [command for command in commands if command.job.schedule_id.startswith("burst")]):
        for previous in (settled, None):
            events, _ = checking.decide_admitting(state, commands_now, now, settled=previous)
            assert checking.fold(state, events) == one_by_one(state, events)
    again = [command.job for command in unconstrained]
    later = [replace(command.job, id=command.job.id + "-next", sequence=command.job.sequence + 1)
             for command in unconstrained]
    admitted = [checking.JobsAdmitted(tuple(again), now), checking.JobsAdmitted(tuple(later), now)]
    assert checking.fold(state, admitted) == one_by_one(state, admitted)
