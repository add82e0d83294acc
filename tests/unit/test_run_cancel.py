"""Cancel and time limits on the run aggregate: the cancel is recorded first; a run whose program has
not started ends KILLED at once; a running one once its program ended, whatever its exit, and is
never retried; an ended run refuses a cancel naming its status."""
from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from sluice.domain import runs
from sluice.domain.common import RunStatus
from sluice.domain.errors import FailedPrecondition
from sluice.domain.jobs import RetryPolicy
from sluice.domain.runs import (
    MarkCompleted,
    MarkFailed,
    MarkLost,
    MarkStarted,
    RequestCancel,
    RunCancelRequested,
    RunCompleted,
    RunKilled,
    RunRequested,
    RunStarted,
    describe_seconds,
    time_limit_cancel,
)
from sluice.eventlog.codec import from_jsonable, to_jsonable
from tests.unit.test_runs import T0, job, play

CANCEL = RequestCancel("wrong input", "token:alice")


def test_cancel_of_a_running_run_is_recorded_and_the_run_goes_on_until_its_program_ended():
    run, events = play(RetryPolicy(), MarkStarted(10, 20), CANCEL)
    assert events[-1] == RunCancelRequested(run.id, "wrong input", "token:alice", T0 + timedelta(seconds=2))
    assert run.status is RunStatus.RUNNING and run.cancel.requested_by == "token:alice"


@pytest.mark.parametrize("ended", [MarkFailed("exit code 143"), MarkLost("vanished"), MarkFailed("x", retryable=False)])
def test_a_cancelled_run_ends_killed_whatever_its_program_exit_and_is_never_retried(ended):
    run, events = play(RetryPolicy(max_retries=5, retry_failed=True), MarkStarted(10, 20), CANCEL, ended)
    assert [type(e) for e in events] == [RunRequested, RunStarted, RunCancelRequested, RunKilled]
    assert run.status is RunStatus.KILLED and run.attempt.status is RunStatus.KILLED
    assert run.error == "killed by token:alice: wrong input" and len(run.attempts) == 1
    assert run.ended_at == T0 + timedelta(seconds=3)


def test_a_run_not_started_yet_ends_killed_at_once_and_is_never_started():
    run, events = play(RetryPolicy(), CANCEL, MarkStarted(10, 20))
    assert [type(e) for e in events] == [RunRequested, RunCancelRequested, RunKilled]
    assert run.status is RunStatus.KILLED and run.pid is None and run.attempt.started_at is None


def test_a_retry_waiting_for_its_delay_ends_killed_at_once():
    run, events = play(RetryPolicy(max_retries=2), MarkStarted(10, 20), MarkLost("gone"), CANCEL)
    assert run.status is RunStatus.KILLED and [a.status for a in run.attempts] == [RunStatus.LOST, RunStatus.KILLED]


def test_a_completion_that_came_before_the_kill_stands():
    run, events = play(RetryPolicy(), MarkStarted(10, 20), CANCEL, MarkCompleted((), ()))
    assert isinstance(events[-1], RunCompleted) and run.status is RunStatus.COMPLETED


def test_a_second_cancel_records_nothing_more():
    _, events = play(RetryPolicy(), MarkStarted(10, 20), CANCEL, RequestCancel("again", "token:bob"))
    assert [type(e) for e in events] == [RunRequested, RunStarted, RunCancelRequested]


@pytest.mark.parametrize("ending, status", [((MarkCompleted((), ()),), "COMPLETED"), ((MarkFailed("boom", False),), "FAILED"),
                                            ((CANCEL, MarkFailed("exit code 143")), "KILLED")])
def test_cancel_of_an_ended_run_is_refused_naming_its_status(ending, status):
    run, _ = play(RetryPolicy(), MarkStarted(10, 20), *ending)
    with pytest.raises(FailedPrecondition, match=f"has ended: it is {status}"):
        runs.decide(run, CANCEL, T0 + timedelta(hours=1))


def test_the_time_limit_counts_from_the_current_attempt_start_and_cancels_with_its_reason():
    limited = replace(job(), max_run_seconds=7200)
    started = runs.evolve(runs.evolve(None, RunRequested("r1", limited, T0)), RunStarted("r1", 10, T0 + timedelta(seconds=30)))
    assert started.time_limit_at == T0 + timedelta(seconds=7230)
    assert time_limit_cancel(started, T0 + timedelta(seconds=7229)) is None
    cancel = time_limit_cancel(started, T0 + timedelta(seconds=7230))
    assert cancel == RequestCancel("time limit 2h exceeded", runs.TIME_LIMIT)
    cancelled = runs.evolve(started, runs.decide(started, cancel, T0 + timedelta(seconds=7230))[0])
    assert cancelled.time_limit_at is None  # asked once


def test_no_time_limit_without_one_or_before_the_start():
    requested = runs.evolve(None, RunRequested("r1", job(), T0))
    assert requested.time_limit_at is None
    running = runs.evolve(requested, RunStarted("r1", 10, T0))
    assert running.time_limit_at is None and time_limit_cancel(running, T0 + timedelta(days=400)) is None


@pytest.mark.parametrize("seconds, text", [(7200, "2h"), (5400, "1h30m"), (90, "1m30s"), (2, "2s"), (86_400, "1d"),
                                           (0, "0s")])
def test_durations_read_as_their_largest_units(seconds, text):
    assert describe_seconds(seconds) == text


def test_the_new_events_round_trip_through_the_log_codec():
    for event in (RunCancelRequested("r1", "why", "token:a", T0), RunKilled("r1", "why", "token:a", T0)):
        assert from_jsonable(type(event), to_jsonable(event)) == event
