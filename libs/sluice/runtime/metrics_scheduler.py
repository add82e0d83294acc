"""The scheduler's own metrics, mostly read from state the services already hold.

- `Reading`: a gauge family read at scrape time from a service's state (jobs by state from the jobs
  view, the checker's queue depth, runs by status, outbox and consumer lag): nothing to keep in step.
- `RunMetrics`: follows the launcher's run streams from the log's head and counts launches, runs
  ending by status with their durations, and each launch's latency from its job's first notification.
- Timer lag: `run_timer_loop` reports how late each due wake-up fired (`observe_timer_lag`) to the
  registry of the service whose task it runs in (`service_context`), none outside a service.

It imports the domain's run events and nothing of the services: the composition passes callables.
"""
from __future__ import annotations

import contextvars
import logging
from collections import Counter as Tally
from datetime import datetime
from typing import Any, Callable, Iterable, Mapping

from prometheus_client import Histogram
from prometheus_client.metrics_core import GaugeMetricFamily
from prometheus_client.registry import Collector

from sluice.domain import runs
from sluice.domain.common import RunStatus
from sluice.domain.jobs import JobState
from sluice.eventlog.codec import EventTypes
from sluice.eventlog.port import EventLog
from sluice.runtime.metrics import LATENCY_BUCKETS, RUN_BUCKETS, Registry

log = logging.getLogger(__name__)

Read = Callable[[], Mapping[tuple[str, ...], float]]


class Reading(Collector):
    """A gauge family whose samples `read` gives at every scrape: {label values: value}. A read that
    fails leaves the family without samples for that scrape (and says why in the log). Several may
    report one family (a consumer's lag each): the registry merges them."""

    def __init__(self, name: str, help: str, labelnames: tuple[str, ...], read: Read) -> None:
        self._name, self._help, self._labelnames, self._read = name, help, labelnames, read

    def collect(self) -> Iterable[GaugeMetricFamily]:
        family = GaugeMetricFamily(self._name, self._help, labels=self._labelnames)
        try:
            samples = self._read()
        except Exception as error:  # a scrape must not fail for one family; the next one reads again
            log.warning("metric %s: reading it failed: %r", self._name, error)
            samples = {}
        for values, value in samples.items():
            family.add_metric(list(values), value)
        yield family


def count_by(values: Iterable[str], every: Iterable[str] = ()) -> dict[tuple[str, ...], float]:
    """{(value,): how many}, with every value of `every` present (at zero): a rate over a missing series is none."""
    tally = Tally(values)
    return {(value,): float(tally.get(value, 0)) for value in sorted({*every, *tally})}


# -- the checker ------------------------------------------------------------------------------------

def checker_metrics(registry: Registry, jobs_view: Any, checker: Any) -> list:
    """Jobs by state (`jobs_view.list()`: the jobs the view keeps) and the depth of `checker.state`'s
    queue; no task to run."""
    registry.register(Reading("sluice_jobs", "Jobs by state, as the jobs view keeps them.", ("state",),
                              lambda: count_by((job.state.value for job in jobs_view.list()),
                                               (state.value for state in JobState))))
    registry.register(Reading("sluice_checker_queue_depth", "Jobs in the checker's queue, waiting on their constraints.",
                              (), lambda: {(): float(len(checker.state.queue))}))
    return []


# -- the launcher -----------------------------------------------------------------------------------

RUN_TYPES = EventTypes(runs.EVENTS)
ENDED = {"RunCompleted": RunStatus.COMPLETED, "RunFailed": RunStatus.FAILED, "RunLost": RunStatus.LOST,
         "RunKilled": RunStatus.KILLED}


class RunMetrics:
    """Launches, run ends by status with durations, notification-to-launch latency, from the run
    streams recorded after the log's head at start (what happened before is not counted again)."""

    def __init__(self, registry: Registry, event_log: EventLog, get_run: Callable[[str], runs.Run | None]) -> None:
        self._log, self._get_run = event_log, get_run
        self.launches = registry.counter("sluice_launches_total", "Run attempts started (a retry is one more).",
                                         ("attempt",))
        self.ended = registry.counter("sluice_runs_ended_total", "Run attempts that ended, by status.", ("status",))
        self.durations = registry.histogram("sluice_run_duration_seconds", "Time from an attempt's start to its end.",
                                            ("status",), buckets=RUN_BUCKETS)
        self.latency = registry.histogram(
            "sluice_notification_to_launch_seconds",
            "Time from the first notification of a run's job to the run's first start.", buckets=LATENCY_BUCKETS)
        for status in ENDED.values():
            self.ended.labels(status.value)
            self.durations.labels(status.value)
        for attempt in ("first", "retry"):
            self.launches.labels(attempt)

    async def follow(self) -> None:
        async for recorded in self._log.subscribe(after=self._log.head_position(), prefixes=(runs.stream_name(""),)):
            if recorded.type in ("RunStarted", *ENDED):
                self.observe(RUN_TYPES.decode(recorded))

    def observe(self, event: Any) -> None:
        run = self._get_run(event.run_id)
        if isinstance(event, runs.RunStarted):
            self.launches.labels("first" if event.attempt == 1 else "retry").inc()
            notified = [n.time for n in run.job.context.notifications] if run is not None and event.attempt == 1 else []
            if notified:
                self.latency.observe(_seconds(min(notified), event.at))
            return
        status = ENDED[type(event).__name__].value
        self.ended.labels(status).inc()
        started = run.attempt.started_at if run is not None else None
        if started is not None:
            self.durations.labels(status).observe(_seconds(started, event.at))


def run_status_reading(runs_kept: Callable[[], Iterable[runs.Run]]) -> Read:
    return lambda: count_by((run.status.value for run in runs_kept()), (s.value for s in RunStatus))


def launcher_metrics(registry: Registry, event_log: EventLog, launcher: Any) -> list:
    """Runs by status (`launcher.runs()`: every one not ended, each schedule's newest ended ones) and
    RunMetrics (`launcher.get` finds a run); the task that follows the log."""
    registry.register(Reading("sluice_runs", "Runs the launcher keeps, by status (not ended, and recent ended ones).",
                              ("status",), run_status_reading(launcher.runs)))
    return [RunMetrics(registry, event_log, launcher.get).follow()]


# -- timers -----------------------------------------------------------------------------------------

_TIMER_LAG: contextvars.ContextVar[Histogram | None] = contextvars.ContextVar("sluice_timer_lag", default=None)


def service_context(registry: Registry) -> contextvars.Context:
    """A context for the tasks of the service whose registry this is: their timer loops report to it."""
    context = contextvars.copy_context()
    context.run(_TIMER_LAG.set, registry.histogram(
        "sluice_timer_lag_seconds", "How late a due timer fired: from its due time to the pass that ran it.",
        buckets=LATENCY_BUCKETS))
    return context


def observe_timer_lag(due: datetime, fired: datetime) -> None:
    histogram = _TIMER_LAG.get()
    if histogram is not None:
        histogram.observe(_seconds(due, fired))


def _seconds(start: datetime, end: datetime) -> float:
    return max(0.0, (end - start).total_seconds())
