"""The alerts aggregate's decide/evolve on plain values: SLA deadlines (complete-by a local time, within N
minutes of a trigger), failure alerts, the delivery outbox with its backoff, and hostile policies."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from sluice.domain.alerts import watch
from sluice.domain.alerts.messages import GIVE_UP_AFTER, MAX_RETRY, retry_delay
from sluice.domain.alerts.policy import (
    AlertOn,
    AlertPolicy,
    CompleteBy,
    CompleteWithin,
    next_deadline,
    redacted,
    validate_policy,
)
from sluice.domain.alerts.watch import (
    NOTICE_GRACE,
    CheckDeadlines,
    ObserveJobTriggered,
    ObserveRunStatus,
    ObserveScheduleName,
    RecordAttempt,
    SetAlertPolicy,
    SlaMissed,
    WebhookDeliveryRequested,
)
from sluice.domain.common import RunStatus
from sluice.domain.errors import InvalidArgument

UTC = timezone.utc
T0 = datetime(2026, 11, 26, 3, 0, tzinfo=UTC)  # 04:00 in Berlin
HOOK = "https://hooks.example.com/services/T0/B0/secret"
BY_SIX_BERLIN = AlertPolicy("s-1", CompleteBy("06:00", "Europe/Berlin"), (HOOK,))


class World:
    """decide + evolve, as the service runs them, with the events kept."""

    def __init__(self) -> None:
        self.state = watch.AlertsState()
        self.events: list = []

    def do(self, command, now: datetime) -> list:
        events = watch.decide(self.state, command, now)
        self.state = watch.fold(events, self.state)
        self.events += events
        return events


def status(status: RunStatus, at: datetime, run: str = "r-1", job: str = "j-1") -> ObserveRunStatus:
    return ObserveRunStatus("s-1", job, run, "ns.app.prog", status, at)


def test_complete_by_deadline_is_the_next_local_time_of_day_in_the_zone():
    assert next_deadline(CompleteBy("06:00", "Europe/Berlin"), T0) == datetime(2026, 11, 26, 5, tzinfo=UTC)
    assert next_deadline(CompleteBy("06:00", "Europe/Berlin"), datetime(2026, 11, 26, 5, tzinfo=UTC)) == \
        datetime(2026, 11, 27, 5, tzinfo=UTC)
    summer = datetime(2026, 7, 1, 12, tzinfo=UTC)
    assert next_deadline(CompleteBy("06:00", "Europe/Berlin"), summer) == datetime(2026, 7, 2, 4, tzinfo=UTC)


def test_a_deadline_without_a_completed_run_is_missed_once_and_asks_one_delivery_per_webhook():
    world = World()
    world.do(ObserveScheduleName("s-1", "ns", "daily"), T0)
    world.do(SetAlertPolicy(BY_SIX_BERLIN), T0)
    deadline = datetime(2026, 11, 26, 5, tzinfo=UTC)
    assert watch.next_deadline_at(world.state) == deadline + NOTICE_GRACE
    assert world.do(CheckDeadlines(), deadline + NOTICE_GRACE - timedelta(seconds=1)) == []  # its notice may be on its way
    events = world.do(CheckDeadlines(), deadline + NOTICE_GRACE)
    missed, requested = events
    assert isinstance(missed, SlaMissed) and missed.deadline == datetime(2026, 11, 26, 5, tzinfo=UTC)
    assert isinstance(requested, WebhookDeliveryRequested) and requested.url == HOOK
    body = json.loads(requested.body)
    assert body["sluice"]["event"] == "sla_missed" and body["sluice"]["schedule_name"] == "daily"
    assert "daily" in body["text"] and body["blocks"][0]["type"] == "section"
    assert world.do(CheckDeadlines(), T0 + timedelta(hours=3)) == []  # the next deadline is tomorrow's
    assert world.state.watches["s-1"].next_deadline == datetime(2026, 11, 27, 5, tzinfo=UTC)
    assert [m.deadline for m in world.state.misses] == [datetime(2026, 11, 26, 5, tzinfo=UTC)]


def test_a_run_completed_on_the_day_before_the_deadline_meets_it_and_a_late_one_does_not():
    world = World()
    world.do(SetAlertPolicy(BY_SIX_BERLIN), T0)
    world.do(status(RunStatus.COMPLETED, T0 + timedelta(minutes=30)), T0 + timedelta(minutes=30))
    assert [type(e).__name__ for e in world.do(CheckDeadlines(), T0 + timedelta(hours=2) + NOTICE_GRACE)] == \
        ["DeadlinePassed"]
    late = datetime(2026, 11, 27, 5, 1, tzinfo=UTC)
    world.do(status(RunStatus.COMPLETED, late, run="r-2"), late)
    missed = world.do(CheckDeadlines(), late + NOTICE_GRACE)
    assert [type(e).__name__ for e in missed] == ["SlaMissed", "WebhookDeliveryRequested"]


def test_a_completed_notice_arriving_within_the_grace_still_meets_the_deadline():
    world = World()
    world.do(SetAlertPolicy(BY_SIX_BERLIN), T0)
    deadline = datetime(2026, 11, 26, 5, tzinfo=UTC)
    world.do(status(RunStatus.COMPLETED, deadline - timedelta(seconds=5)), deadline + timedelta(seconds=70))
    assert [type(e).__name__ for e in world.do(CheckDeadlines(), deadline + NOTICE_GRACE)] == ["DeadlinePassed"]


def test_downtime_across_several_deadlines_misses_each_once():
    world = World()
    world.do(SetAlertPolicy(BY_SIX_BERLIN), T0)
    events = world.do(CheckDeadlines(), T0 + timedelta(days=3))
    assert [e.deadline.day for e in events if isinstance(e, SlaMissed)] == [26, 27, 28]
    assert len({e.delivery_id for e in events if isinstance(e, WebhookDeliveryRequested)}) == 3


def test_within_minutes_counts_from_each_jobs_trigger_and_a_run_started_later_completes_joined_jobs():
    world = World()
    world.do(SetAlertPolicy(AlertPolicy("s-1", CompleteWithin(30), (HOOK,))), T0)
    world.do(ObserveJobTriggered("s-1", "j-1", T0, joinable=True), T0)
    world.do(ObserveJobTriggered("s-1", "j-2", T0 + timedelta(minutes=5), joinable=True), T0)
    world.do(ObserveJobTriggered("s-1", "j-3", T0 + timedelta(minutes=20), joinable=True), T0)
    world.do(status(RunStatus.STARTING, T0 + timedelta(minutes=10)), T0)  # j-2 joined j-1's run
    world.do(status(RunStatus.COMPLETED, T0 + timedelta(minutes=25)), T0)
    assert set(world.state.watches["s-1"].jobs) == {"j-3"}
    events = world.do(CheckDeadlines(), T0 + timedelta(minutes=50) + NOTICE_GRACE)
    assert [(e.kind, e.job_id) for e in events if isinstance(e, SlaMissed)] == [("within_minutes", "j-3")]
    assert len(world.state.watches["s-1"].jobs) == 0


def test_a_failed_or_lost_run_alerts_and_a_killed_or_completed_one_does_not():
    world = World()
    world.do(SetAlertPolicy(AlertPolicy("s-1", None, (HOOK, "http://127.0.0.1:9/hook"))), T0)
    failed = world.do(status(RunStatus.FAILED, T0), T0)
    assert [type(e).__name__ for e in failed] == ["FailureAlerted", "WebhookDeliveryRequested", "WebhookDeliveryRequested"]
    assert json.loads(failed[1].body)["sluice"]["run_id"] == "r-1"
    assert [type(e).__name__ for e in world.do(status(RunStatus.LOST, T0, run="r-2"), T0)][0] == "FailureAlerted"
    assert world.do(status(RunStatus.KILLED, T0, run="r-3"), T0) == []
    assert world.do(status(RunStatus.COMPLETED, T0, run="r-4"), T0) == []
    only_sla = World()
    only_sla.do(SetAlertPolicy(AlertPolicy("s-1", CompleteWithin(5), (HOOK,), (AlertOn.SLA_MISS,))), T0)
    assert [type(e).__name__ for e in only_sla.do(status(RunStatus.FAILED, T0), T0)] == ["FailureAlerted"]


def test_deliveries_retry_with_capped_backoff_until_acknowledged_or_abandoned():
    world = World()
    world.do(SetAlertPolicy(AlertPolicy("s-1", None, (HOOK,))), T0)
    (_, requested) = world.do(status(RunStatus.FAILED, T0), T0)
    assert [d.id for d in watch.due_deliveries(world.state, T0)] == [requested.delivery_id]
    (failed,) = world.do(RecordAttempt(requested.delivery_id, False, "HTTP 500", 0.0), T0)
    assert failed.next_attempt_at == T0 + timedelta(seconds=5) and watch.due_deliveries(world.state, T0) == []
    (delivered,) = world.do(RecordAttempt(requested.delivery_id, True, "HTTP 200", 0.5), T0 + timedelta(seconds=5))
    assert delivered.attempt == 2 and len(world.state.deliveries) == 0
    assert world.do(RecordAttempt(requested.delivery_id, True, "HTTP 200", 0.5), T0) == []  # acknowledged: no more
    assert retry_delay(30, 0.999) <= MAX_RETRY and retry_delay(3, 0.0) == timedelta(seconds=20)

    (_, again) = world.do(status(RunStatus.FAILED, T0, run="r-9"), T0)
    (abandoned,) = world.do(RecordAttempt(again.delivery_id, False, "HTTP 503", 0.1), T0 + GIVE_UP_AFTER)
    assert type(abandoned).__name__ == "WebhookAbandoned" and len(world.state.deliveries) == 0


def test_the_same_cause_derives_the_same_delivery_ids():
    first, second = World(), World()
    for world in (first, second):
        world.do(SetAlertPolicy(AlertPolicy("s-1", None, (HOOK,))), T0)
    assert first.do(status(RunStatus.FAILED, T0), T0) == second.do(status(RunStatus.FAILED, T0), T0)


def test_a_deleted_schedule_takes_its_policy_with_it():
    world = World()
    world.do(SetAlertPolicy(BY_SIX_BERLIN), T0)
    world.do(ObserveScheduleName("s-1", "", None), T0)
    assert len(world.state.watches) == 0 and world.do(CheckDeadlines(), T0 + timedelta(days=2)) == []


@pytest.mark.parametrize("policy, field", [
    (AlertPolicy("", None, (HOOK,)), "policy.schedule_id"),
    (AlertPolicy("../etc", None, (HOOK,)), "policy.schedule_id"),
    (AlertPolicy("s-1", CompleteBy("6am", "Europe/Berlin"), (HOOK,)), "policy.sla.complete_by.time_of_day"),
    (AlertPolicy("s-1", CompleteBy("24:00", "Europe/Berlin"), (HOOK,)), "policy.sla.complete_by.time_of_day"),
    (AlertPolicy("s-1", CompleteBy("06:00", "Mars/Olympus"), (HOOK,)), "policy.sla.complete_by.zone"),
    (AlertPolicy("s-1", CompleteBy("06:00", "../../etc/passwd"), (HOOK,)), "policy.sla.complete_by.zone"),
    (AlertPolicy("s-1", CompleteWithin(0), (HOOK,)), "policy.sla.within_minutes"),
    (AlertPolicy("s-1", None, ()), "policy.webhooks"),
    (AlertPolicy("s-1", None, tuple(f"https://h/{i}" for i in range(6))), "policy.webhooks"),
    (AlertPolicy("s-1", None, (HOOK, HOOK)), "policy.webhooks"),
    (AlertPolicy("s-1", None, ("file:///etc/passwd",)), "policy.webhooks[0]"),
    (AlertPolicy("s-1", None, (HOOK, "https://user:pw@example.com/x")), "policy.webhooks[1]"),
    (AlertPolicy("s-1", None, ("https://example.com/" + "a" * 3000,)), "policy.webhooks[0]"),
    (AlertPolicy("s-1", None, ("https://exa mple.com/",)), "policy.webhooks[0]"),
    (AlertPolicy("s-1", None, ("https:///nohost",)), "policy.webhooks[0]"),
    (AlertPolicy("s-1", None, ("https://b\u00fccher.example/x",)), "policy.webhooks[0]"),
    (AlertPolicy("s-1", None, ("https://example.com:99999/",)), "policy.webhooks[0]"),
    (AlertPolicy("s-1", None, (HOOK,), ()), "policy.on"),
    (AlertPolicy("s-1", None, (HOOK,), (AlertOn.SLA_MISS,)), "policy.sla"),
])
def test_hostile_policies_are_refused_naming_the_field_and_never_echoing_a_url(policy, field):
    with pytest.raises(InvalidArgument) as refused:
        validate_policy(policy)
    assert refused.value.field == field
    assert "pw@" not in str(refused.value) and "secret" not in str(refused.value)


def test_a_schedule_id_may_start_with_a_digit_as_derived_ids_do():
    assert validate_policy(AlertPolicy("9221fb4d-434a-553a-be7c-4a852940bef2", None, (HOOK,))).schedule_id[0] == "9"


def test_answers_and_logs_show_a_webhook_without_its_path():
    assert redacted(HOOK) == "https://hooks.example.com/…"
    assert redacted("http://127.0.0.1:8080") == "http://127.0.0.1:8080"
