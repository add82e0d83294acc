"""The launcher lease, pure: who may take it, when, under which epoch; runs record the owning epoch."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from functools import reduce

import pytest

from sluice.domain import lease, runs
from sluice.domain.common import ProgramRef, RunStatus
from sluice.domain.jobs import Job, RetryPolicy, TriggerContext
from sluice.domain.lease import Acquire, LeaseAcquired, LeaseHeld, LeaseLost, LeaseRenewed, Renew

T0 = datetime(2026, 11, 23, 10, tzinfo=timezone.utc)


def fold(events):
    return reduce(lease.evolve, events, None)


def test_the_first_launcher_takes_epoch_1_until_its_lease_expires():
    events = lease.decide(None, Acquire("a-1", "host-a", 30), T0)
    assert events == [LeaseAcquired("a-1", 1, "host-a", T0 + timedelta(seconds=30), T0)]
    held = fold(events)
    assert not held.expired(T0 + timedelta(seconds=29)) and held.expired(T0 + timedelta(seconds=30))


def test_another_home_takes_the_lease_only_once_it_expired_by_the_recorded_expiry():
    held = fold(lease.decide(None, Acquire("a-1", "host-a", 30), T0))
    with pytest.raises(LeaseHeld, match="a-1"):
        lease.decide(held, Acquire("b-1", "host-b", 30), T0 + timedelta(seconds=29))
    taken = fold([*lease.decide(None, Acquire("a-1", "host-a", 30), T0),
                  *lease.decide(held, Acquire("b-1", "host-b", 30), T0 + timedelta(seconds=30))])
    assert (taken.owner, taken.epoch, taken.home) == ("b-1", 2, "host-b")
    assert taken.home_of(1) == "host-a" and taken.home_of(2) == "host-b" and taken.home_of(3) is None


def test_a_renewal_moves_the_expiry_and_only_the_holder_of_the_epoch_renews():
    acquired = lease.decide(None, Acquire("a-1", "host-a", 30), T0)
    held = fold(acquired)
    renewed = lease.decide(held, Renew("a-1", 1, 30), T0 + timedelta(seconds=10))
    assert renewed == [LeaseRenewed("a-1", 1, T0 + timedelta(seconds=40), T0 + timedelta(seconds=10))]
    with pytest.raises(LeaseHeld):
        lease.decide(fold([*acquired, *renewed]), Acquire("b-1", "host-b", 30), T0 + timedelta(seconds=35))
    with pytest.raises(LeaseLost):
        lease.decide(held, Renew("b-1", 1, 30), T0)
    with pytest.raises(LeaseLost):
        lease.decide(held, Renew("a-1", 2, 30), T0)


def test_the_same_home_takes_the_lease_at_once_its_data_dir_lock_says_the_previous_holder_ended():
    held = fold(lease.decide(None, Acquire("a-1", "host-a", 30), T0))
    (event,) = lease.decide(held, Acquire("a-2", "host-a", 30), T0 + timedelta(seconds=1))
    assert (event.owner, event.epoch) == ("a-2", 2)


def test_run_events_record_the_epoch_of_the_launcher_that_owns_the_attempt():
    job = Job("job-1", "schedule-1", 1, ProgramRef("ns", "app", "p"), TriggerContext("schedule-1", "s", {}), T0,
              retry_policy=RetryPolicy(max_retries=1, delay_seconds=0))
    (requested,) = runs.decide(None, runs.RequestRun(job), T0, epoch=3)
    run = runs.evolve(None, requested)
    assert requested.epoch == 3 and run.attempt.epoch == 3
    (started,) = runs.decide(run, runs.MarkStarted(42, 7), T0, epoch=3)
    run = runs.evolve(run, started)
    (retry,) = runs.decide(run, runs.MarkLost("its launcher lost the lease"), T0, epoch=4)
    run = runs.evolve(run, retry)
    assert [(a.number, a.status, a.epoch) for a in run.attempts] == [(1, RunStatus.LOST, 3), (2, RunStatus.STARTING, 4)]
