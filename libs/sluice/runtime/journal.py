"""The journal: an INFO line for every job transition, run launch, retry and end, as a service records
them, with the schedule, job and run ids as the line's fields (sluice.runtime.logs: JSON lines).

Each service follows its own streams (ServiceSpec.route_prefixes) from the log's head: a line per event
recorded after it started, none for the history recovered. With the `sluice.journal` logger above INFO
(the default level, WARNING) nothing is followed at all.
"""
from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any, Callable, Sequence

import orjson

from sluice.eventlog.batched import expand
from sluice.eventlog.port import EventLog, RecordedEvent

log = logging.getLogger("sluice.journal")
RUNS_REMEMBERED = 10_000
"""Runs whose job and schedule ids the journal keeps for their later lines (the oldest go first)."""


def _of_job(data: dict) -> dict[str, str]:
    return {"job_id": data["job"]["id"], "schedule_id": data["job"]["schedule_id"]}


def _ids(*names: str) -> Callable[[dict], dict[str, str]]:
    return lambda data: {name: data[name] for name in names if data.get(name)}


LINES: dict[str, tuple[str, Callable[[dict], dict[str, str]], str]] = {
    # event type: (message, with the event's fields; its ids; the job state it leads to, "" for none)
    "JobCreated": ("job created, waiting for its trigger", _ids("job_id", "schedule_id"), "PENDING_TRIGGER"),
    "NotificationMatched": ("job created, waiting for its trigger", _ids("job_id", "schedule_id"), "PENDING_TRIGGER"),
    "JobTriggered": ("job triggered", _of_job, "PENDING_CONSTRAINT"),
    "JobDiscarded": ("job discarded: {reason}", _ids("job_id", "schedule_id"), "DISCARDED"),
    "JobDeferred": ("job waits on {waiting_on}", _ids("job_id"), "PENDING_CONSTRAINT"),
    "JobAdmitted": ("job admitted: its run's launch is requested", _of_job, "PENDING_LAUNCH"),
    "JobsAdmitted": ("job admitted: its run's launch is requested", lambda data: {}, "PENDING_LAUNCH"),
    "JobWithdrawn": ("job withdrawn: {reason}", _ids("job_id", "schedule_id"), "DISCARDED"),
    "NotificationsJoined": ("job joined the waiting job {into}", _ids("job_id"), "JOINED"),
    "RunRequested": ("run requested", lambda data: {"run_id": data["run_id"], **_of_job(data)}, "LAUNCHED"),
    "RunStarted": ("run attempt {attempt} started, pid {pid}", _ids("run_id", "attempt"), ""),
    "RunCompleted": ("run completed", _ids("run_id"), ""),
    "RunFailed": ("run attempt failed: {error}", _ids("run_id"), ""),
    "RunLost": ("run attempt lost: {reason}", _ids("run_id"), ""),
    "RunCancelRequested": ("run cancel requested by {requested_by}: {reason}", _ids("run_id"), ""),
    "RunKilled": ("run killed, as {requested_by} asked: {reason}", _ids("run_id"), ""),
    "RunRetryScheduled": ("run attempt {attempt} ended {status}; the next one is due at {due_at}",
                          _ids("run_id", "attempt"), ""),
}
ONLY_WITH: dict[str, str] = {"NotificationMatched": "schedule_id"}
"""Event types that make a line only when this field is set: a NotificationMatched that created its job."""
PER_JOB: dict[str, str] = {"JobsAdmitted": "jobs"}
"""Event types that make a line per job of this field, as an event of that job alone would."""


class Journal:
    def __init__(self, event_log: EventLog, prefixes: Sequence[str], service: str) -> None:
        self._log, self._prefixes, self._service = event_log, tuple(prefixes), service
        self._runs: OrderedDict[str, dict[str, str]] = OrderedDict()

    @staticmethod
    def enabled() -> bool:
        return log.isEnabledFor(logging.INFO)

    async def follow(self) -> None:
        async for record in self._log.subscribe(after=self._log.head_position(), prefixes=self._prefixes):
            for recorded in expand(record, LINES):
                if recorded.type in LINES:
                    self.write(recorded)

    def write(self, recorded: RecordedEvent) -> None:
        message, ids_of, state = LINES[recorded.type]
        try:
            data = orjson.loads(recorded.data)
            if recorded.type in ONLY_WITH and not data.get(ONLY_WITH[recorded.type]):
                return
            ids = ids_of(data)
            text = message.format_map(_Fields(data))
            per_job = [_of_job({"job": job}) for job in data[PER_JOB[recorded.type]]] \
                if recorded.type in PER_JOB else None
        except (ValueError, KeyError, TypeError) as error:   # a line for an event of another shape, not a crash
            log.info("%s (its fields unreadable: %r)", recorded.type, error,
                     extra={"event": recorded.type, "service": self._service})
            return
        if per_job is not None:
            for job_ids in per_job:
                log.info(text, extra={**job_ids, "event": recorded.type, "state": state, "service": self._service})
            return
        ids.update(self._job_of_run(ids, recorded.type))
        log.info(text, extra={**ids, "event": recorded.type, "state": state, "service": self._service})
        if recorded.type == "JobTriggered" and data.get("next_job_id"):  # it stands for the next job's JobCreated too
            message, _, state = LINES["JobCreated"]
            log.info(message, extra={"job_id": data["next_job_id"], "schedule_id": ids.get("schedule_id", ""),
                                     "event": recorded.type, "state": state, "service": self._service})

    def _job_of_run(self, ids: dict[str, str], event: str) -> dict[str, str]:
        """A run's job and schedule ids, known from its RunRequested, for its later lines."""
        run_id = ids.get("run_id")
        if run_id is None:
            return {}
        if event == "RunRequested":
            self._runs[run_id] = {"job_id": ids["job_id"], "schedule_id": ids["schedule_id"]}
            if len(self._runs) > RUNS_REMEMBERED:
                self._runs.popitem(last=False)
            return {}
        known = self._runs.get(run_id, {})
        if event == "RunCompleted":
            self._runs.pop(run_id, None)
        return known


class _Fields(dict):
    """An event's fields for a message: a missing one reads as "?"."""

    def __missing__(self, key: str) -> Any:
        return "?"
