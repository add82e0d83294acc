"""The run aggregate: attempts, LOST and FAILED attempts retried per the job's retry policy."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from sluice.domain import runs
from sluice.eventlog.codec import from_jsonable, to_jsonable
from sluice.domain.common import ProgramRef, RunStatus
from sluice.domain.jobs import Job, RetryPolicy, TriggerContext
from sluice.domain.runs import (
    MarkCompleted,
    MarkFailed,
    MarkLost,
    MarkStarted,
    RequestRun,
    RunFailed,
    RunLost,
    RunRequested,
    RunRetryScheduled,
    RunStarted,
)

T0 = datetime(2026, 11, 23, 10, tzinfo=timezone.utc)
PROGRAM = ProgramRef("web", "analytics", "hourly")


def job(policy: RetryPolicy = RetryPolicy()) -> Job:
    return Job("job-1", "schedule-1", 1, PROGRAM, TriggerContext("schedule-1", "hourly"), T0, retry_policy=policy)


def play(policy: RetryPolicy, *commands: object, step: timedelta = timedelta(seconds=1)):
    """Decide and evolve each command in turn, the clock moving `step` before each; the run and all events."""
    run, events, now = None, [], T0
    for command in (RequestRun(job(policy)), *commands):
        decided = runs.decide(run, command, now)
        for event in decided:
            run = runs.evolve(run, event)
        events += decided
        now += step
    return run, events


def test_a_requested_run_has_one_attempt_due_at_once():
    run, events = play(RetryPolicy())
    assert [type(e) for e in events] == [RunRequested]
    assert run.status is RunStatus.STARTING and run.due_at == T0
    assert [(a.number, a.status) for a in run.attempts] == [(1, RunStatus.STARTING)]


def test_starting_records_the_process_identity_of_the_current_attempt():
    run, events = play(RetryPolicy(), MarkStarted(123, 456))
    assert events[-1] == RunStarted(run.id, 123, T0 + timedelta(seconds=1), 1, 456)
    assert (run.status, run.pid, run.attempt.pid, run.attempt.process_start) == (RunStatus.RUNNING, 123, 123, 456)


def test_a_second_start_of_the_same_attempt_changes_nothing():
    _, events = play(RetryPolicy(), MarkStarted(123, 456), MarkStarted(999, 1))
    assert [type(e) for e in events] == [RunRequested, RunStarted]


def test_a_lost_attempt_with_retries_left_schedules_the_next_after_the_delay():
    run, events = play(RetryPolicy(max_retries=2, delay_seconds=30, backoff=2), MarkStarted(1, 1), MarkLost("vanished"))
    lost_at = T0 + timedelta(seconds=2)
    assert events[-1] == RunRetryScheduled(run.id, 1, RunStatus.LOST, "vanished", lost_at + timedelta(seconds=30), lost_at)
    assert run.status is RunStatus.STARTING and run.ended_at is None and run.pid is None
    assert [(a.number, a.status) for a in run.attempts] == [(1, RunStatus.LOST), (2, RunStatus.STARTING)]
    assert run.due_at == lost_at + timedelta(seconds=30)
    assert run.started_at == T0 + timedelta(seconds=1), "the run started with its first attempt"


def test_retries_back_off_and_the_last_lost_attempt_ends_the_run_lost():
    policy = RetryPolicy(max_retries=2, delay_seconds=10, backoff=3)
    run, events = play(policy, MarkStarted(1, 1), MarkLost("a"), MarkStarted(2, 2), MarkLost("b"),
                       MarkStarted(3, 3), MarkLost("c"))
    retries = [e for e in events if isinstance(e, RunRetryScheduled)]
    assert [(e.due_at - e.at).total_seconds() for e in retries] == [10, 30]
    assert isinstance(events[-1], RunLost) and run.status is RunStatus.LOST and run.error == "c"
    assert [(a.number, a.status, a.pid, a.error) for a in run.attempts] == [
        (1, RunStatus.LOST, 1, "a"), (2, RunStatus.LOST, 2, "b"), (3, RunStatus.LOST, 3, "c")]


def test_no_retries_ends_the_run_lost_at_once():
    run, events = play(RetryPolicy(max_retries=0), MarkLost("restarted"))
    assert [type(e) for e in events] == [RunRequested, RunLost] and run.status is RunStatus.LOST


def test_a_failed_attempt_is_retried_only_when_the_policy_says_so():
    run, _ = play(RetryPolicy(max_retries=3), MarkStarted(1, 1), MarkFailed("exit code 1"))
    assert run.status is RunStatus.FAILED and len(run.attempts) == 1
    run, events = play(RetryPolicy(max_retries=3, retry_failed=True), MarkStarted(1, 1), MarkFailed("exit code 1"))
    assert isinstance(events[-1], RunRetryScheduled) and events[-1].status is RunStatus.FAILED
    assert [a.status for a in run.attempts] == [RunStatus.FAILED, RunStatus.STARTING]


def test_a_failure_retrying_cannot_help_ends_the_run_failed_whatever_the_policy():
    _, events = play(RetryPolicy(max_retries=3, retry_failed=True), MarkStarted(1, 1),
                     MarkFailed("publishing outputs failed", retryable=False))
    assert isinstance(events[-1], RunFailed)


def test_a_retried_attempt_can_complete_the_run():
    run, _ = play(RetryPolicy(), MarkStarted(1, 1), MarkLost("gone"), MarkStarted(2, 2), MarkCompleted((), ()))
    assert run.status is RunStatus.COMPLETED and run.error == ""
    assert [a.status for a in run.attempts] == [RunStatus.LOST, RunStatus.COMPLETED]


def test_an_ended_run_ignores_later_commands():
    run, events = play(RetryPolicy(max_retries=0), MarkLost("gone"), MarkStarted(2, 2), MarkLost("again"))
    assert [type(e) for e in events] == [RunRequested, RunLost] and run.status is RunStatus.LOST


def test_commands_need_a_run():
    with pytest.raises(ValueError):
        runs.decide(None, MarkLost("x"), T0)


def test_events_written_before_attempts_and_retry_policies_existed_still_fold():
    requested = to_jsonable(RunRequested("r", job(), T0))
    del requested["job"]["retry_policy"]
    old_requested = from_jsonable(RunRequested, requested)
    old_started = from_jsonable(RunStarted, {"run_id": "r", "pid": 7, "at": T0.isoformat()})
    run = runs.evolve(runs.evolve(None, old_requested), old_started)
    assert old_requested.job.retry_policy == RetryPolicy()
    assert (old_started.attempt, run.attempt.number, run.attempt.pid, run.status) == (1, 1, 7, RunStatus.RUNNING)
