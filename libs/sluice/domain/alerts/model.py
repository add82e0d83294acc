"""The alerts aggregate's values: its state, the commands it takes and the events it records
(sluice.domain.alerts.watch decides and evolves)."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Mapping, Union

import immutables

from sluice.domain.alerts.policy import AlertPolicy
from sluice.domain.common import RunStatus

STREAM = "alerts"


# -- state ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class JobDeadline:
    job_id: str
    triggered_at: datetime
    due_at: datetime
    joinable: bool
    """It may have joined an earlier job's run: a run that started after its trigger completes it too."""


@dataclass(frozen=True)
class Watch:
    policy: AlertPolicy
    next_deadline: datetime | None = None
    """complete_by: the next deadline, and whether a COMPLETED run met it already."""
    met: bool = False
    jobs: Mapping[str, JobDeadline] = field(default_factory=immutables.Map)
    """within_minutes: the jobs not completed yet."""
    runs_started: Mapping[str, datetime] = field(default_factory=immutables.Map)


@dataclass(frozen=True)
class Delivery:
    id: str
    schedule_id: str
    url: str
    body: str
    requested_at: datetime
    attempts: int = 0
    next_attempt_at: datetime | None = None
    """None: at once."""
    last_error: str = ""


@dataclass(frozen=True)
class SlaMiss:
    schedule_id: str
    kind: str
    deadline: datetime
    job_id: str
    at: datetime


@dataclass(frozen=True)
class AlertsState:
    watches: Mapping[str, Watch] = field(default_factory=immutables.Map)
    names: Mapping[str, tuple[str, str]] = field(default_factory=immutables.Map)
    """schedule id -> (namespace, name) from the schedules topic: for messages and authorization."""
    deliveries: Mapping[str, Delivery] = field(default_factory=immutables.Map)
    """Pending only."""
    misses: tuple[SlaMiss, ...] = ()
    """The newest MAX_MISSES_KEPT, oldest first."""


# -- commands ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SetAlertPolicy:
    policy: AlertPolicy


@dataclass(frozen=True)
class DeleteAlertPolicy:
    schedule_id: str
    cause: str = "deleted on request"


@dataclass(frozen=True)
class ObserveScheduleName:
    schedule_id: str
    namespace: str
    name: str | None
    """None: the schedule was deleted (its policy goes with it)."""


@dataclass(frozen=True)
class ObserveJobTriggered:
    schedule_id: str
    job_id: str
    triggered_at: datetime
    joinable: bool


@dataclass(frozen=True)
class ObserveRunStatus:
    schedule_id: str
    job_id: str
    run_id: str
    program: str
    status: RunStatus
    at: datetime


@dataclass(frozen=True)
class CheckDeadlines:
    pass


@dataclass(frozen=True)
class RecordAttempt:
    delivery_id: str
    delivered: bool
    outcome: str
    """The HTTP status, or the error, in words."""
    jitter: float
    """In [0, 1): drawn by the caller (the domain draws nothing)."""


AlertsCommand = Union[SetAlertPolicy, DeleteAlertPolicy, ObserveScheduleName, ObserveJobTriggered, ObserveRunStatus,
                      CheckDeadlines, RecordAttempt]


# -- events --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class AlertPolicySet:
    policy: AlertPolicy
    at: datetime
    next_deadline: datetime | None


@dataclass(frozen=True)
class AlertPolicyDeleted:
    schedule_id: str
    at: datetime
    cause: str


@dataclass(frozen=True)
class ScheduleNamed:
    schedule_id: str
    namespace: str
    name: str


@dataclass(frozen=True)
class JobDeadlineSet:
    schedule_id: str
    deadline: JobDeadline


@dataclass(frozen=True)
class RunStartObserved:
    schedule_id: str
    run_id: str
    at: datetime


@dataclass(frozen=True)
class SlaMet:
    schedule_id: str
    deadline: datetime | None
    """complete_by: the deadline met; None for within_minutes (then `job_ids`)."""
    job_ids: tuple[str, ...] = ()
    run_id: str = ""


@dataclass(frozen=True)
class DeadlinePassed:
    """A complete_by deadline passed having been met: the next one is watched."""
    schedule_id: str
    deadline: datetime
    next_deadline: datetime


@dataclass(frozen=True)
class SlaMissed:
    schedule_id: str
    kind: str
    deadline: datetime
    job_id: str
    at: datetime
    next_deadline: datetime | None
    """complete_by: the deadline watched next."""


@dataclass(frozen=True)
class FailureAlerted:
    schedule_id: str
    job_id: str
    run_id: str
    status: RunStatus
    at: datetime


@dataclass(frozen=True)
class WebhookDeliveryRequested:
    delivery_id: str
    schedule_id: str
    url: str
    body: str
    at: datetime


@dataclass(frozen=True)
class WebhookAttemptFailed:
    delivery_id: str
    attempt: int
    at: datetime
    error: str
    next_attempt_at: datetime


@dataclass(frozen=True)
class WebhookDelivered:
    delivery_id: str
    attempt: int
    at: datetime
    outcome: str


@dataclass(frozen=True)
class WebhookAbandoned:
    delivery_id: str
    attempt: int
    at: datetime
    error: str


AlertsEvent = Union[AlertPolicySet, AlertPolicyDeleted, ScheduleNamed, JobDeadlineSet, RunStartObserved, SlaMet,
                    DeadlinePassed, SlaMissed, FailureAlerted, WebhookDeliveryRequested, WebhookAttemptFailed,
                    WebhookDelivered, WebhookAbandoned]
EVENTS = AlertsEvent.__args__
