"""Jobs a person asks for rather than a trigger: run a schedule now, or backfill a range of it.

Both become ordinary jobs in the checker's queue (`sluice.domain.checking`), so they wait for the
schedule's run constraints like any fired job. A backfill is one `BackfillRequested` event that
carries its whole expansion (one item per job); folding it queues every job, so a restart replays
the same jobs, never fewer or more. Its progress is counted by the checker's own events
(sluice.domain.request_book).

    decide_run_now(schedule, command, job_id, now)            -> ManualJobRequested
    decide_backfill(schedule, command, backfill_id, now)      -> BackfillRequested
    decide_request(book, definition, command, now)            -> the events of any of the three requests

A request id given again answers the first request's job or backfill and makes nothing, if the request
is the same (`request_fingerprint`); a different request under a used id is refused (AIP-155).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Callable, Iterator, Mapping

from croniter import croniter

from sluice.domain import bounds
from sluice.domain.common import Notification, PartitionCommitted, PartitionRef
from sluice.domain.constraints import ConcurrencyConstraint
from sluice.domain.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from sluice.domain.jobs import Job, TriggerContext, WaitingJobPolicy
from sluice.domain.schedules import Schedule
from sluice.domain.triggers import PartitionTrigger, TimeTrigger, leaves, next_fire
from sluice.domain.triggers.cron import to_instant, zone_of
from sluice.domain.triggers.specs import partition_matches, require_aware
from sluice.ids import derived_id

if TYPE_CHECKING:
    from sluice.domain.request_book import RequestBook

MAX_BACKFILL_JOBS = 10_000
"""A backfill of more jobs is refused: each is a queued job in the checker's memory and an item of one event."""


# Commands
@dataclass(frozen=True)
class RunScheduleNow:
    """Make one manual job of the schedule, through its constraints (the timing ones skipped when
    `ignore_constraints`; concurrency always holds)."""

    schedule_id: str
    properties: Mapping[str, str] = field(default_factory=dict)
    """Over the schedule's own properties."""
    logical_time: datetime | None = None
    """None: the clock's now."""
    ignore_constraints: bool = False
    request_id: str = ""
    """A client's id for the request: the same id again gives the same job, not a second one."""


@dataclass(frozen=True)
class CandidatePartition:
    """A partition the datasets service listed for a partition-trigger backfill."""

    partition: PartitionRef
    committed_at: datetime


@dataclass(frozen=True)
class StartBackfill:
    """One job per fire time of the schedule's time trigger in [start, end), or, when `partitions` is
    given (listed by the caller from the datasets service), one job per partition its partition
    trigger admits."""

    schedule_id: str
    start: datetime | None
    end: datetime | None
    partitions: tuple[CandidatePartition, ...] | None = None
    request_id: str = ""
    keys: str = ""
    """The key ranges the partitions were listed by, as the user gave them (shown, not interpreted)."""
    key_ranges: tuple[tuple[str, str, str], ...] = ()
    """The same ranges as (name, lower, upper): what tells a request given again from another one."""


@dataclass(frozen=True)
class CancelBackfill:
    backfill_id: str


# Events
@dataclass(frozen=True)
class ManualJobRequested:
    """A run-now job entered PENDING_CONSTRAINT."""

    job: Job
    request_id: str
    at: datetime
    fingerprint: str = ""
    """The request's `request_fingerprint` when it has a request id ("" in events from before it was kept)."""


@dataclass(frozen=True)
class BackfillItem:
    job_id: str
    logical_time: datetime
    partition: PartitionRef | None = None


@dataclass(frozen=True)
class BackfillRequested:
    """A backfill and its expansion: every item is a job built from `template` (`jobs_of`)."""

    backfill_id: str
    template: Job
    items: tuple[BackfillItem, ...]
    start: datetime | None
    end: datetime | None
    keys: str
    request_id: str
    at: datetime
    dataset: tuple[str, str] | None = None
    """(namespace, dataset) of the partitions of a partition-trigger backfill."""
    fingerprint: str = ""
    """The request's `request_fingerprint` when it has a request id ("" in events from before it was kept)."""


@dataclass(frozen=True)
class BackfillCancelled:
    """The backfill's waiting jobs are withdrawn (DISCARDED); its running runs go on."""

    backfill_id: str
    schedule_id: str
    withdrawn: tuple[str, ...]
    at: datetime


@dataclass(frozen=True)
class Backfill:
    """A backfill's progress: counters the checker's events move (`sluice.domain.checking`)."""

    id: str
    schedule_id: str
    start: datetime | None
    end: datetime | None
    keys: str
    requested_at: datetime
    total: int
    waiting: int
    running: int = 0
    done: int = 0
    failed: int = 0
    """Of `done`: runs that ended other than COMPLETED."""
    discarded: int = 0
    cancelled_at: datetime | None = None
    request_id: str = ""

    @property
    def finished(self) -> bool:
        return self.waiting == 0 and self.running == 0


def manual_job_id(schedule_id: str, request_id: str, counter: int) -> str:
    if request_id:
        return derived_id("job", schedule_id, "manual", request_id)
    return derived_id("job", schedule_id, "manual", str(counter))


def backfill_id_for(schedule_id: str, request_id: str, counter: int) -> str:
    if request_id:
        return derived_id("backfill", schedule_id, request_id)
    return derived_id("backfill", schedule_id, str(counter))


def require_runnable(schedule_id: str, schedule: Schedule | None) -> Schedule:
    if schedule is None:
        raise NotFound(f"schedule {schedule_id} not found")
    if schedule.paused:
        raise FailedPrecondition(f"schedule {schedule_id} ({schedule.name}) is paused with its app or namespace: "
                                 "resume it to run it")
    if not schedule.enabled:
        raise FailedPrecondition(f"schedule {schedule_id} ({schedule.name}) is disabled: enable it to run it")
    return schedule


def decide_run_now(schedule: Schedule, command: RunScheduleNow, job_id: str, now: datetime) -> ManualJobRequested:
    if command.logical_time is not None:
        require_aware(command.logical_time)
    properties = {**schedule.properties, **command.properties}
    _check_properties(properties)
    job = _job(schedule, job_id, now, command.logical_time or now, (), properties, sequence=0)
    if command.ignore_constraints:
        job = replace(job, constraints=tuple(c for c in job.constraints if isinstance(c, ConcurrencyConstraint)))
    return ManualJobRequested(job, command.request_id, now, _fingerprint_if_identified(command))


def _check_properties(properties: Mapping[str, str]) -> None:
    """The schedule's properties with the request's over them, bounded as a schedule's are."""
    bounds.check_size("properties", len(properties), bounds.MAX_PROPERTIES, "properties")
    for key, value in properties.items():
        bounds.check_text(f"properties[{key[:40]!r}]", key + value, bounds.MAX_PROPERTIES_BYTES)
    bounds.check_size("properties", sum(bounds.utf8_size(k) + bounds.utf8_size(v) for k, v in properties.items()),
                      bounds.MAX_PROPERTIES_BYTES)


def decide_backfill(schedule: Schedule, command: StartBackfill, backfill_id: str, now: datetime) -> BackfillRequested:
    dataset = None
    if command.partitions is None:
        items = _time_items(schedule, command.start, command.end, backfill_id)
    else:
        trigger = partition_trigger_of(schedule)
        dataset = (trigger.namespace, trigger.dataset)
        items = _partition_items(trigger, command.partitions, backfill_id)
    if not items:
        raise InvalidArgument("--from" if command.partitions is None else "--keys",
                              f"no {'fire time' if command.partitions is None else 'existing partition'} of "
                              f"schedule {schedule.name} in the range: nothing to backfill")
    # No wait timeout: a backfill's jobs queue behind each other on purpose, the last ones for hours.
    template = replace(_job(schedule, backfill_id, now, now, (), dict(schedule.properties), sequence=0),
                       timeout_seconds=0)
    return BackfillRequested(backfill_id, template, items, command.start, command.end, command.keys,
                             command.request_id, now, dataset, _fingerprint_if_identified(command))


def request_fingerprint(command: RunScheduleNow | StartBackfill) -> str:
    """A digest of what the request asks for, its schedule and request id aside (they key it): equal
    for a request given again, whatever the order of its properties or key ranges or the zone of its times."""
    if isinstance(command, RunScheduleNow):
        asked = ["run", sorted(command.properties.items()), _instant(command.logical_time), command.ignore_constraints]
    else:
        asked = ["backfill", _instant(command.start), _instant(command.end), sorted(command.key_ranges)]
    return hashlib.blake2b(json.dumps(asked).encode(), digest_size=16).hexdigest()


def _fingerprint_if_identified(command: RunScheduleNow | StartBackfill) -> str:
    return request_fingerprint(command) if command.request_id else ""


def _instant(at: datetime | None) -> str | None:
    return None if at is None else require_aware(at).astimezone(timezone.utc).isoformat()


def partition_trigger_of(schedule: Schedule) -> PartitionTrigger:
    """The schedule's one partition trigger, which a partition backfill lists partitions for."""
    found = [leaf for leaf in leaves(schedule.trigger) if isinstance(leaf, PartitionTrigger)]
    if len(found) != 1:
        raise InvalidArgument("--keys", f"schedule {schedule.name} has {len(found)} partition triggers: a "
                                        "partition backfill needs exactly one")
    return found[0]


def time_triggers_of(schedule: Schedule) -> list[TimeTrigger]:
    return [leaf for leaf in leaves(schedule.trigger) if isinstance(leaf, TimeTrigger)]


def _time_items(schedule: Schedule, start: datetime | None, end: datetime | None,
                backfill_id: str) -> tuple[BackfillItem, ...]:
    if start is None or end is None:
        raise InvalidArgument("--from" if start is None else "--to", "a time backfill needs both --from and --to")
    require_aware(start)
    require_aware(end)
    if end <= start:
        raise InvalidArgument("--to", f"{end.isoformat()} is not after --from {start.isoformat()}")
    triggers = time_triggers_of(schedule)
    if not triggers:
        raise InvalidArgument("--keys", f"schedule {schedule.name} has no time trigger: backfill its partitions "
                                        "with --keys")
    times: set[datetime] = set()
    walked = 0  # every trigger's fires, also those another trigger has: 256 leaves of one cron are 256 walks
    for trigger in dict.fromkeys(triggers):
        for fire in fire_times(trigger, start, end):
            times.add(fire)
            walked += 1
            if walked > MAX_BACKFILL_JOBS:
                raise InvalidArgument("--to", f"the range holds more than {MAX_BACKFILL_JOBS} fire times of "
                                              f"schedule {schedule.name} (counted per time trigger): bring --to "
                                              f"closer")
    return tuple(BackfillItem(derived_id("job", backfill_id, str(index)), at)
                 for index, at in enumerate(sorted(times), start=1))


def fire_times(trigger: TimeTrigger, start: datetime, end: datetime) -> Iterator[datetime]:
    """The trigger's fires in [start, end), in order: what `next_fire` gives one after another (same DST
    policy), from one walk of the cron's wall times instead of a new one per fire."""
    fire = next_fire(trigger, start - timedelta(microseconds=1))
    zone = zone_of(trigger.zone)
    walls = croniter(trigger.cron, fire.astimezone(zone).replace(tzinfo=None),
                     second_at_beginning=len(trigger.cron.split()) == 6)
    while fire < end:
        yield fire
        following = to_instant(walls.get_next(datetime), zone)
        while following <= fire:  # a repeated hour's second pass, or a wall time merged into a gap's end
            following = to_instant(walls.get_next(datetime), zone)
        fire = following


def _partition_items(trigger: PartitionTrigger, partitions: tuple[CandidatePartition, ...],
                     backfill_id: str) -> tuple[BackfillItem, ...]:
    admitted = [p for p in partitions if partition_matches(trigger.filter, p.partition)]
    if len(admitted) > MAX_BACKFILL_JOBS:
        raise InvalidArgument("--to", f"the range holds more than {MAX_BACKFILL_JOBS} partitions: narrow --keys "
                                      "or bring --to closer")
    admitted.sort(key=lambda p: (p.committed_at, sorted(p.partition.key.items())))
    return tuple(BackfillItem(derived_id("job", backfill_id, str(index)), p.committed_at, p.partition)
                 for index, p in enumerate(admitted, start=1))


def jobs_of(event: BackfillRequested) -> list[Job]:
    """The backfill's jobs, in order: each with the logical time (and partition) its item gives."""
    template = event.template
    jobs = []
    for sequence, item in enumerate(event.items, start=1):
        notifications = ()
        if item.partition is not None and event.dataset is not None:
            namespace, dataset = event.dataset
            notifications = (Notification(derived_id("notification", item.job_id), item.logical_time,
                                          PartitionCommitted(namespace, dataset, (item.partition,))),)
        context = replace(template.context, notifications=notifications, logical_time=item.logical_time)
        jobs.append(replace(template, id=item.job_id, context=context, sequence=sequence))
    return jobs


def _job(schedule: Schedule, job_id: str, now: datetime, logical_time: datetime,
         notifications: tuple[Notification, ...], properties: Mapping[str, str], sequence: int) -> Job:
    context = TriggerContext(schedule.id, schedule.name, properties, notifications, logical_time)
    return Job(job_id, schedule.id, schedule.generation, schedule.program, context, now, schedule.priority,
               schedule.constraints, schedule.timeout_seconds, schedule.timeout_policy, sequence=sequence,
               triggered_at=now, retry_policy=schedule.retry_policy,
               waiting_job_policy=WaitingJobPolicy.SEPARATE, spark_conf=schedule.spark_conf)



def decide_request(book: RequestBook, definition: Callable[[str], Schedule | None],
                   command: RunScheduleNow | StartBackfill | CancelBackfill,
                   now: datetime) -> list[ManualJobRequested | BackfillRequested | BackfillCancelled]:
    """A person's request, given what the checker keeps of requests and the schedules it follows:
    nothing when its request id was seen before (or the backfill has nothing left to cancel)."""
    match command:
        case CancelBackfill(backfill_id):
            backfill = book.backfills.get(backfill_id)
            if backfill is None:
                raise NotFound(f"backfill {backfill_id} not found")
            if backfill.cancelled_at is not None or backfill.waiting == 0:
                return []
            return [BackfillCancelled(backfill_id, backfill.schedule_id, tuple(book.waiting_jobs(backfill_id)), now)]
        case RunScheduleNow(schedule_id):
            if (job_id := book.requested("run", schedule_id, command.request_id)) is not None:
                _require_same_request(book, "run", command, f"run-now request of schedule {schedule_id} (job {job_id})")
                return []
            schedule = require_runnable(schedule_id, definition(schedule_id))
            return [decide_run_now(schedule, command, manual_job_id(schedule_id, command.request_id,
                                                                    book.manual_jobs + 1), now)]
        case StartBackfill(schedule_id):
            if (backfill_id := book.requested("backfill", schedule_id, command.request_id)) is not None:
                _require_same_request(book, "backfill", command,
                                      f"backfill of schedule {schedule_id} (backfill {backfill_id})")
                return []
            schedule = require_runnable(schedule_id, definition(schedule_id))
            return [decide_backfill(schedule, command, backfill_id_for(schedule_id, command.request_id, book.count + 1),
                                    now)]
    raise TypeError(f"unknown command {command!r}")


def _require_same_request(book: RequestBook, kind: str, command: RunScheduleNow | StartBackfill,
                          earlier: str) -> None:
    if book.differs(kind, command.schedule_id, command.request_id, request_fingerprint(command)):
        raise AlreadyExists(f"request_id {command.request_id!r} was given earlier to a different {earlier}: a retry "
                            "must repeat the request exactly; give another request a new request_id")
