"""The alerts aggregate (one stream, `alerts`): the policies, the SLA deadlines watched, and the outbox of
webhook deliveries. Pure: `decide(state, command, now) -> events`, `evolve(state, event) -> state`.

A deadline passing without a COMPLETED run that meets it appends SlaMissed; a run ending FAILED or LOST
appends FailureAlerted; each appends a WebhookDeliveryRequested per webhook of the policy (if it alerts on
that). A delivery stays pending until WebhookDelivered or WebhookAbandoned: a restarted service sends
what is pending again, never what was acknowledged."""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import immutables

from sluice.domain.alerts.messages import GIVE_UP_AFTER, retry_delay, run_failed_body, sla_missed_body
from sluice.domain.alerts.model import (  # noqa: F401 (the aggregate's vocabulary, read as watch.X)
    AlertPolicyDeleted,
    AlertPolicySet,
    AlertsCommand,
    AlertsEvent,
    AlertsState,
    CheckDeadlines,
    DeadlinePassed,
    DeleteAlertPolicy,
    Delivery,
    EVENTS,
    FailureAlerted,
    JobDeadline,
    JobDeadlineSet,
    ObserveJobTriggered,
    ObserveRunStatus,
    ObserveScheduleName,
    RecordAttempt,
    RunStartObserved,
    STREAM,
    ScheduleNamed,
    SetAlertPolicy,
    SlaMet,
    SlaMiss,
    SlaMissed,
    Watch,
    WebhookAbandoned,
    WebhookAttemptFailed,
    WebhookDelivered,
    WebhookDeliveryRequested,
)
from sluice.domain.alerts.policy import AlertOn, AlertPolicy, CompleteBy, CompleteWithin, meets_deadline, next_deadline
from sluice.domain.common import RunStatus
from sluice.domain.errors import NotFound
from sluice.ids import derived_id

MAX_MISSES_KEPT = 10_000
"""The newest SLA misses kept in memory for ListSlaMisses (the log keeps them all)."""
MAX_CATCH_UP_DEADLINES = 400
"""Deadlines of one schedule a single check passes at most (a service down for a year catches up in steps)."""
ALERTING_STATUSES = (RunStatus.FAILED, RunStatus.LOST)
NOTICE_GRACE = timedelta(minutes=2)
"""A deadline is judged this long after it passed: the COMPLETED notification of a run that ended just in time may
still be on its way over the bus."""
_MINUTE = timedelta(minutes=1)


# -- decide --------------------------------------------------------------------------------------

def decide(state: AlertsState, command: AlertsCommand, now: datetime) -> list[AlertsEvent]:
    match command:
        case SetAlertPolicy(policy):
            first = next_deadline(policy.sla, now) if isinstance(policy.sla, CompleteBy) else None
            return [AlertPolicySet(policy, now, first)]
        case DeleteAlertPolicy(schedule_id, cause):
            if schedule_id not in state.watches:
                raise NotFound(f"schedule {schedule_id} has no alert policy")
            return [AlertPolicyDeleted(schedule_id, now, cause)]
        case ObserveScheduleName(schedule_id, namespace, name):
            if name is None:
                return [AlertPolicyDeleted(schedule_id, now, "schedule deleted")] if schedule_id in state.watches else []
            known = state.names.get(schedule_id) == (namespace, name)
            return [] if known else [ScheduleNamed(schedule_id, namespace, name)]
        case ObserveJobTriggered():
            return _job_triggered(state, command)
        case ObserveRunStatus():
            return _run_status(state, command)
        case CheckDeadlines():
            return _check_deadlines(state, now)
        case RecordAttempt():
            return _attempt(state, command, now)
    raise TypeError(f"unknown command {command!r}")


def decide_many(state: AlertsState, commands: list[AlertsCommand], now: datetime) -> list[AlertsEvent]:
    """Each command decided on the state the previous ones' events left."""
    events: list[AlertsEvent] = []
    for command in commands:
        decided = decide(state, command, now)
        state = fold(decided, state)
        events += decided
    return events


def schedule_name(state: AlertsState, schedule_id: str) -> str:
    return state.names.get(schedule_id, ("", ""))[1]


def _job_triggered(state: AlertsState, command: ObserveJobTriggered) -> list[AlertsEvent]:
    watch = state.watches.get(command.schedule_id)
    if watch is None or not isinstance(watch.policy.sla, CompleteWithin) or command.job_id in watch.jobs:
        return []
    due = command.triggered_at + watch.policy.sla.minutes * _MINUTE
    return [JobDeadlineSet(command.schedule_id, JobDeadline(command.job_id, command.triggered_at, due, command.joinable))]


def _run_status(state: AlertsState, command: ObserveRunStatus) -> list[AlertsEvent]:
    watch = state.watches.get(command.schedule_id)
    if watch is None:
        return []
    events: list[AlertsEvent] = []
    sla = watch.policy.sla
    if command.status is RunStatus.COMPLETED:
        if isinstance(sla, CompleteBy) and not watch.met and watch.next_deadline is not None \
                and meets_deadline(sla, command.at, watch.next_deadline):
            events.append(SlaMet(command.schedule_id, watch.next_deadline, run_id=command.run_id))
        elif isinstance(sla, CompleteWithin):
            started = watch.runs_started.get(command.run_id)
            done = tuple(job.job_id for job in watch.jobs.values()
                         if job.job_id == command.job_id or (job.joinable and started is not None
                                                             and job.triggered_at <= started))
            if done:
                events.append(SlaMet(command.schedule_id, None, done, command.run_id))
    elif command.status in (RunStatus.STARTING, RunStatus.RUNNING):
        if isinstance(sla, CompleteWithin) and command.run_id not in watch.runs_started:
            events.append(RunStartObserved(command.schedule_id, command.run_id, command.at))
    elif command.status in ALERTING_STATUSES:
        events.append(FailureAlerted(command.schedule_id, command.job_id, command.run_id, command.status, command.at))
        if watch.policy.alerts_on(AlertOn.FAILURE):
            body = run_failed_body(command.schedule_id, schedule_name(state, command.schedule_id), command.program,
                                   command.job_id, command.run_id, command.status.value, command.at)
            events += _requests(watch.policy, ("failure", command.run_id, command.status.value), body, command.at)
    return events


def _check_deadlines(state: AlertsState, now: datetime) -> list[AlertsEvent]:
    """Every deadline passed NOTICE_GRACE ago or more: met, or missed."""
    judged_until = now - NOTICE_GRACE
    events: list[AlertsEvent] = []
    for schedule_id, watch in state.watches.items():
        sla = watch.policy.sla
        if isinstance(sla, CompleteBy):
            deadline, met = watch.next_deadline, watch.met
            for _ in range(MAX_CATCH_UP_DEADLINES):
                if deadline is None or deadline > judged_until:
                    break
                following = next_deadline(sla, deadline)
                if met:
                    events.append(DeadlinePassed(schedule_id, deadline, following))
                else:
                    events += _missed(state, watch, "complete_by", deadline, "", now, following)
                deadline, met = following, False
        elif isinstance(sla, CompleteWithin):
            for job in sorted(watch.jobs.values(), key=lambda j: (j.due_at, j.job_id)):
                if job.due_at <= judged_until:
                    events += _missed(state, watch, "within_minutes", job.due_at, job.job_id, now, None)
    return events


def _missed(state: AlertsState, watch: Watch, kind: str, deadline: datetime, job_id: str, now: datetime,
            following: datetime | None) -> list[AlertsEvent]:
    schedule_id = watch.policy.schedule_id
    events: list[AlertsEvent] = [SlaMissed(schedule_id, kind, deadline, job_id, now, following)]
    if watch.policy.alerts_on(AlertOn.SLA_MISS):
        body = sla_missed_body(schedule_id, schedule_name(state, schedule_id), kind, deadline, job_id)
        events += _requests(watch.policy, ("sla", kind, deadline.isoformat(), job_id), body, now)
    return events


def _requests(policy: AlertPolicy, cause: tuple[str, ...], body: str, now: datetime) -> list[AlertsEvent]:
    """One delivery per webhook, its id derived from the cause and the URL: the same cause never asks twice."""
    return [WebhookDeliveryRequested(derived_id("webhook", policy.schedule_id, *cause, url), policy.schedule_id, url,
                                     body, now)
            for url in policy.webhooks]


def _attempt(state: AlertsState, command: RecordAttempt, now: datetime) -> list[AlertsEvent]:
    delivery = state.deliveries.get(command.delivery_id)
    if delivery is None:
        return []  # delivered or abandoned already (a late second attempt)
    attempt = delivery.attempts + 1
    if command.delivered:
        return [WebhookDelivered(delivery.id, attempt, now, command.outcome)]
    if now - delivery.requested_at >= GIVE_UP_AFTER:
        return [WebhookAbandoned(delivery.id, attempt, now, command.outcome)]
    return [WebhookAttemptFailed(delivery.id, attempt, now, command.outcome,
                                 now + retry_delay(attempt, command.jitter))]


def due_deliveries(state: AlertsState, now: datetime) -> list[Delivery]:
    """Pending deliveries whose next attempt is due, oldest request first."""
    due = [d for d in state.deliveries.values() if d.next_attempt_at is None or d.next_attempt_at <= now]
    return sorted(due, key=lambda d: (d.requested_at, d.id))


def next_deadline_at(state: AlertsState) -> datetime | None:
    """When the earliest SLA deadline watched is judged (NOTICE_GRACE after it): time alone may make a miss then."""
    times = [w.next_deadline for w in state.watches.values() if w.next_deadline is not None]
    times += [job.due_at for w in state.watches.values() for job in w.jobs.values()]
    earliest = min(times, default=None)
    return None if earliest is None else earliest + NOTICE_GRACE


def next_attempt_at(state: AlertsState) -> datetime | None:
    """The earliest pending delivery's next attempt."""
    return min((d.next_attempt_at or d.requested_at for d in state.deliveries.values()), default=None)


# -- evolve --------------------------------------------------------------------------------------

def evolve(state: AlertsState, event: AlertsEvent) -> AlertsState:
    match event:
        case AlertPolicySet(policy, _, first):
            return replace(state, watches=state.watches.set(policy.schedule_id, Watch(policy, first)))
        case AlertPolicyDeleted(schedule_id):
            return replace(state, watches=_without(state.watches, schedule_id))
        case ScheduleNamed(schedule_id, namespace, name):
            return replace(state, names=state.names.set(schedule_id, (namespace, name)))
        case JobDeadlineSet(schedule_id, deadline):
            return _watch(state, schedule_id, lambda w: replace(w, jobs=w.jobs.set(deadline.job_id, deadline)))
        case RunStartObserved(schedule_id, run_id, at):
            return _watch(state, schedule_id, lambda w: replace(w, runs_started=w.runs_started.set(run_id, at)))
        case SlaMet(schedule_id, deadline, job_ids):
            if deadline is not None:
                return _watch(state, schedule_id, lambda w: replace(w, met=True) if w.next_deadline == deadline else w)
            return _watch(state, schedule_id, lambda w: replace(w, jobs=_without_all(w.jobs, job_ids),
                                                                runs_started=_prune_runs(w, job_ids)))
        case DeadlinePassed(schedule_id, _, following):
            return _watch(state, schedule_id, lambda w: replace(w, next_deadline=following, met=False))
        case SlaMissed(schedule_id, kind, deadline, job_id, at, following):
            missed = SlaMiss(schedule_id, kind, deadline, job_id, at)
            state = replace(state, misses=(*state.misses[-(MAX_MISSES_KEPT - 1):], missed))
            if job_id:
                return _watch(state, schedule_id, lambda w: replace(w, jobs=_without(w.jobs, job_id)))
            return _watch(state, schedule_id, lambda w: replace(w, next_deadline=following, met=False))
        case FailureAlerted():
            return state
        case WebhookDeliveryRequested(delivery_id, schedule_id, url, body, at):
            return replace(state, deliveries=state.deliveries.set(delivery_id, Delivery(delivery_id, schedule_id, url,
                                                                                        body, at)))
        case WebhookAttemptFailed(delivery_id, attempt, _, error, next_at):
            delivery = state.deliveries.get(delivery_id)
            if delivery is None:
                return state
            return replace(state, deliveries=state.deliveries.set(delivery_id, replace(
                delivery, attempts=attempt, next_attempt_at=next_at, last_error=error)))
        case WebhookDelivered(delivery_id) | WebhookAbandoned(delivery_id):
            return replace(state, deliveries=_without(state.deliveries, delivery_id))
    raise TypeError(f"unknown event {event!r}")


def fold(events: list[AlertsEvent], state: AlertsState | None = None) -> AlertsState:
    state = state or AlertsState()
    for event in events:
        state = evolve(state, event)
    return state


def _watch(state: AlertsState, schedule_id: str, change) -> AlertsState:
    watch = state.watches.get(schedule_id)
    if watch is None:
        return state
    return replace(state, watches=state.watches.set(schedule_id, change(watch)))


def _without(mapping: immutables.Map, key: str) -> immutables.Map:
    return mapping.delete(key) if key in mapping else mapping


def _without_all(mapping: immutables.Map, keys: tuple[str, ...]) -> immutables.Map:
    for key in keys:
        mapping = _without(mapping, key)
    return mapping


def _prune_runs(watch: Watch, done: tuple[str, ...]) -> immutables.Map:
    """Run starts are kept only while some job still waits on a run."""
    remaining = _without_all(watch.jobs, done)
    return watch.runs_started if remaining else immutables.Map()


