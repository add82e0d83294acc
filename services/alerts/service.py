"""The alerts service: keeps each schedule's alert policy, watches its SLA deadlines on the injected clock,
and delivers webhooks from the log (WebhookDeliveryRequested -> attempts -> WebhookDelivered).

Consumes the schedules topic (names, deletions), the jobs topic (trigger times, for within-N-minutes
SLAs) and the program-status topic (run ends). Publishes nothing on the bus. One process per log: a
second one would deliver the same requests too (receivers deduplicate by Idempotency-Key)."""
from __future__ import annotations

import asyncio
import logging
import random
from datetime import datetime
from typing import Callable

from sluice.bus.port import Record
from sluice.bus.topics import JOBS, PROGRAM_NOTIFICATIONS, SCHEDULES
from sluice.clock import Clock
from sluice.domain.alerts import watch
from sluice.domain.alerts.policy import AlertPolicy, redacted, validate_policy
from sluice.domain.alerts.watch import (
    STREAM,
    AlertsCommand,
    AlertsState,
    CheckDeadlines,
    DeleteAlertPolicy,
    ObserveJobTriggered,
    ObserveRunStatus,
    ObserveScheduleName,
    RecordAttempt,
    SetAlertPolicy,
    WebhookDelivered,
)
from sluice.domain.common import ProgramStatusChanged
from sluice.domain.errors import NotFound
from sluice.eventlog.codec import EventTypes
from sluice.eventlog.port import Checkpoint, EventLog, WrongExpectedVersion
from sluice.runtime.aggregates import AggregateStore, attempt_batch, execute, forget_conflicting
from sluice.runtime.consumer import BatchHandler
from sluice.runtime.errors import MalformedMessage
from sluice.runtime.metrics import Registry
from sluice.runtime.offsets import ConsumedOffsets
from sluice.runtime.timers import MAX_TIMER_SLEEP, run_timer_loop
from sluice.runtime.unit_of_work import ConsumingUnitOfWork
from sluice.waiting import wait_set
from sluice.wire.common import notification_from_bytes
from sluice.wire.sent_jobs import SentJobs, job_received
from sluice.wire.schedules import parse_schedule_change
from sluice_services.alerts.webhooks import AiohttpSender, WebhookSender
from sluice_services.catalogue import ALERTS

TYPES = EventTypes(watch.EVENTS)
OUTCOMES = ("delivered", "failed", "abandoned")
MAX_CONCURRENT_POSTS = 8
_OUTCOME_OF = {"WebhookDelivered": "delivered", "WebhookAbandoned": "abandoned"}
SNAPSHOTS = ALERTS.snapshots
SNAPSHOT_VERSION = 1
"""The schema version of the `alerts` stream's snapshot (Loaded[AlertsState]): bump it when AlertsState (or
anything it holds) changes shape; a snapshot of another version is ignored and the stream folded instead."""
log = logging.getLogger(__name__)


class AlertsService:
    def __init__(self, event_log: EventLog, clock: Clock, sender: WebhookSender | None = None,
                 jitter: Callable[[], float] = random.random, sent_jobs: SentJobs | None = None) -> None:
        """`sent_jobs`: the jobs a matcher of this process routed, taken instead of parsed."""
        self._log = event_log
        self._sent_jobs = sent_jobs
        self._clock = clock
        self._sender = sender or AiohttpSender()
        self._jitter = jitter
        self._store: AggregateStore[AlertsState] = AggregateStore(
            event_log, TYPES, watch.evolve, AlertsState(), clock=clock, snapshot=SNAPSHOTS[0],
            snapshot_version=SNAPSHOT_VERSION,
            size=lambda state: len(state.watches) + len(state.deliveries) + len(state.misses))
        self._offsets = ConsumedOffsets(event_log, "alerts")
        self._unit_of_work: ConsumingUnitOfWork[AlertsCommand] = ConsumingUnitOfWork(
            self._offsets, self._decide, self._reload, what=STREAM)
        self._changed = asyncio.Event()
        self._judge_from = clock.now()
        self._deliveries_changed = asyncio.Event()
        self._outcomes = _deliveries_counter(Registry())

    def instrument(self, metrics: Registry) -> list:
        """Counts attempts in the service's registry: delivered, failed (to be retried), abandoned."""
        self._outcomes = _deliveries_counter(metrics)
        return []

    def recover(self) -> None:
        self._store.restore()  # the stream's last snapshot; its first load reads the events after it
        # deadlines that passed while the service was down are judged once the bus's backlog had time to come in
        self._judge_from = self._clock.now() + watch.NOTICE_GRACE
        self._offsets.clear()
        self._wake()

    @property
    def state(self) -> AlertsState:
        return self._store.load(STREAM).state

    # -- policies (gRPC) -----------------------------------------------------------------------

    def set_policy(self, policy: AlertPolicy) -> watch.Watch:
        self._execute(SetAlertPolicy(validate_policy(policy)))
        return self.get(policy.schedule_id)

    def get(self, schedule_id: str) -> watch.Watch:
        found = self.state.watches.get(schedule_id)
        if found is None:
            raise NotFound(f"schedule {schedule_id} has no alert policy")
        return found

    def delete(self, schedule_id: str) -> None:
        self._execute(DeleteAlertPolicy(schedule_id))

    def namespace_of(self, schedule_id: str) -> str | None:
        named = self.state.names.get(schedule_id)
        return named[0] if named else None

    # -- the bus ------------------------------------------------------------------------------

    def handlers(self) -> dict[str, BatchHandler]:
        return {SCHEDULES: BatchHandler(self.parse_schedule_change, self.apply),
                JOBS: BatchHandler(self.parse_job_triggered, self.apply),
                PROGRAM_NOTIFICATIONS: BatchHandler(self.parse_program_status, self.apply)}

    @staticmethod
    def parse_schedule_change(record: Record) -> ObserveScheduleName:
        change = parse_schedule_change(record)
        schedule = change.schedule
        return ObserveScheduleName(change.schedule_id, schedule.program.namespace if schedule else "",
                                   schedule.name if schedule else None)

    def parse_job_triggered(self, record: Record) -> ObserveJobTriggered:
        job = job_received(record.value, self._sent_jobs)
        return ObserveJobTriggered(job.schedule_id, job.id, job.triggered_at or job.created_at, job.joinable)

    @staticmethod
    def parse_program_status(record: Record) -> ObserveRunStatus:
        notification = notification_from_bytes(record.value)
        status = notification.payload
        if not isinstance(status, ProgramStatusChanged):
            raise MalformedMessage(f"expected a program status notification, got {type(status).__name__}")
        return ObserveRunStatus(status.schedule_id, status.job_id, status.run_id, status.program.qualified(),
                                status.status, notification.time)

    async def apply(self, items: list[tuple[Record, AlertsCommand]]) -> None:
        self._unit_of_work.handle(items)

    # -- deadlines ----------------------------------------------------------------------------

    def fire_due(self) -> int:
        """Pass the deadlines the clock reached; the SLA misses appended."""
        due = self.next_deadline_at()
        if due is None or due > self._clock.now():
            return 0
        return sum(isinstance(e, watch.SlaMissed) for e in self._execute(CheckDeadlines()))

    def next_deadline_at(self) -> datetime | None:
        due = watch.next_deadline_at(self.state)
        return None if due is None else max(due, self._judge_from)

    async def run_timers(self) -> None:
        await run_timer_loop(self._clock, self.fire_due, self.next_deadline_at, self._changed)

    # -- deliveries ---------------------------------------------------------------------------

    async def deliver_due(self) -> int:
        """POST every delivery due now (MAX_CONCURRENT_POSTS at a time: a slow receiver delays no other), recording
        each attempt; the deliveries acknowledged."""
        due = watch.due_deliveries(self.state, self._clock.now())
        delivered = 0
        for start in range(0, len(due), MAX_CONCURRENT_POSTS):
            delivered += sum(await asyncio.gather(*(self._deliver(d) for d in due[start:start + MAX_CONCURRENT_POSTS])))
        return delivered

    async def _deliver(self, delivery: watch.Delivery) -> int:
        outcome = await self._sender.post(delivery.url, delivery.body, delivery.id)
        events = self._execute(RecordAttempt(delivery.id, outcome.delivered, outcome.outcome, self._jitter()))
        for event in events:
            kind = type(event).__name__
            self._outcomes.labels(_OUTCOME_OF.get(kind, "failed")).inc()
            if not isinstance(event, WebhookDelivered):
                log.warning("webhook %s to %s: %s (%s)", delivery.id, redacted(delivery.url), outcome.outcome, kind,
                            extra={"schedule_id": delivery.schedule_id, "event": kind})
        return sum(isinstance(e, WebhookDelivered) for e in events)

    async def close(self) -> None:
        await self._sender.close()

    async def run_deliveries(self) -> None:
        try:
            while True:
                self._deliveries_changed.clear()
                await self.deliver_due()
                next_at = watch.next_attempt_at(self.state)
                delay = MAX_TIMER_SLEEP if next_at is None else (next_at - self._clock.now()).total_seconds()
                await wait_set(self._deliveries_changed, max(0.0, min(delay, MAX_TIMER_SLEEP)))
        finally:
            await self.close()

    # -- the aggregate ------------------------------------------------------------------------

    def _execute(self, command: AlertsCommand) -> list[watch.AlertsEvent]:
        now = self._clock.now()
        _, events = execute(self._store, self._log, STREAM, lambda state: watch.decide(state, command, now))
        self._wake()
        _log_events(events)
        return events

    def _decide(self, commands: list[AlertsCommand], checkpoints: list[Checkpoint] = ()) -> bool:
        now = self._clock.now()
        decided = attempt_batch(self._store, self._log, [STREAM],
                                lambda _, state: watch.decide_many(state, commands, now), checkpoints=checkpoints)
        self._wake()
        _log_events(decided.get(STREAM, []))
        return bool(decided)

    def _reload(self, conflict: WrongExpectedVersion) -> None:
        forget_conflicting(self._store, conflict)

    def _wake(self) -> None:
        self._changed.set()
        self._deliveries_changed.set()


def _deliveries_counter(registry: Registry):
    counter = registry.counter("sluice_webhook_deliveries", "Webhook delivery attempts, by outcome.", ("outcome",))
    for outcome in OUTCOMES:
        counter.labels(outcome)  # each series exported from the start, at 0
    return counter


def _log_events(events: list) -> None:
    """At INFO a line per SLA miss, failure alert and delivery, with the schedule's (and job's, run's) id."""
    for event in events:
        match event:
            case watch.SlaMissed(schedule_id, kind, deadline, job_id):
                log.info("SLA missed (%s, deadline %s)", kind, deadline.isoformat(),
                         extra={"schedule_id": schedule_id, "job_id": job_id, "event": "SlaMissed"})
            case watch.FailureAlerted(schedule_id, job_id, run_id, status):
                log.info("run ended %s: alerting", status.value,
                         extra={"schedule_id": schedule_id, "job_id": job_id, "run_id": run_id,
                                "event": "FailureAlerted"})
            case watch.WebhookDelivered(delivery_id, attempt, _, outcome):
                log.info("webhook %s delivered at attempt %d (%s)", delivery_id, attempt, outcome,
                         extra={"event": "WebhookDelivered", "attempt": attempt})
