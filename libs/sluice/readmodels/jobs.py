"""Jobs read model: every job's state and history, projected from the matcher's, checker's and
launcher's events. Disposable: rebuilt at start from its last snapshot (the projection at a position,
saved every SNAPSHOT_EVERY events it folds, as a delta of the jobs changed since the last whole
snapshot: sluice.runtime.map_snapshots) and the log after it; `sluice rebuild jobs` drops the
snapshot and folds the whole log again.

The events that carry a whole job (the matcher's JobTriggered, the checker's JobAdmitted, the
launcher's RunRequested) are read for the few fields the view shows, not decoded into a Job: a
fired job is kept as the JobTriggered event's bytes and decoded when a query asks for it
(`JobView.job`). Decoding every job cost the checker a quarter of its CPU over Kafka, and a
snapshot packing decoded jobs took three times as long."""
from __future__ import annotations

import asyncio
import json
import logging
from concurrent.futures import Future, wait
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Iterator

import orjson

from sluice.clock import epoch_micros
from sluice.domain import backfills, checking, matching, runs
from sluice.eventlog.batched import BATCH_TYPE, expand
from sluice.eventlog.codec import DECODING_ERRORS, EventTypes, UndecodableEvent, dumps, from_jsonable
from sluice.domain.jobs import Job, JobState
from sluice.eventlog.port import EventLog, RecordedEvent
from sluice.readmodels.retention import ListingKey, RetainedListing
from sluice.runtime import snapshots
from sluice.runtime.map_snapshots import SNAPSHOT_WRITER, MapSnapshots
from sluice.runtime.heap import collector_paused
from sluice.runtime.snapshots import LoopPacer, Schema

TYPES = EventTypes((matching.JobCreated, matching.NotificationMatched, matching.MissedFiresSkipped,
                    matching.JobTriggered, matching.JobDiscarded, checking.JobDeferred, checking.JobAdmitted,
                    checking.JobsAdmitted, checking.JobWithdrawn, checking.NotificationsJoined, runs.RunRequested,
                    backfills.ManualJobRequested, backfills.BackfillRequested, backfills.BackfillCancelled))
"""The events the view folds; the matcher's ScheduleObserved (a whole schedule each) are not decoded."""
STREAMS = (matching.stream_name(""), checking.QUEUE_STREAM, runs.stream_name(""))
"""The streams TYPES are appended to: the view reads only these."""
READ_BY_FIELDS = frozenset({"JobTriggered", "JobAdmitted", "JobsAdmitted", "RunRequested", "NotificationMatched",
                            "NotificationsJoined"})
"""Events the view reads as plain values: each carries a whole job or notification it does not show."""
SNAPSHOT = "jobs"
SNAPSHOT_VERSION = 2
"""The schema version of the view's snapshot (its JobView by job id): bump it when JobView (or anything
it holds) changes shape; a snapshot of another version is ignored and the log folded instead."""
READ_BATCH = 1_000
"""Records read at once: a matcher's batch or a checker's JobsAdmitted holds hundreds of events."""


@dataclass(frozen=True)
class Transition:
    state: JobState
    at: datetime
    cause: str


@dataclass(frozen=True, slots=True)
class JobView:
    id: str
    schedule_id: str
    state: JobState
    created_at: datetime
    updated_at: datetime
    fired: bytes = b""
    """The matcher's JobTriggered event as recorded, once the job fired: `job` decodes it."""
    reason: str = ""
    run_id: str = ""
    notifications: int = 0
    partitions: tuple[tuple[str, str, int], ...] = ()
    """(namespace, dataset, partitions) the matched notifications carried, per dataset (PENDING_TRIGGER's progress)."""
    joined: tuple[bytes, ...] = ()
    """The checker's NotificationsJoined events as recorded, of the later jobs that joined this one."""
    transitions: tuple[tuple[str, datetime, str], ...] = ()
    """(state, at, cause) of every transition, as plain tuples: the cyclic collector stops tracking
    those, while a Transition object each made every full collection visit ~4 more objects per job."""

    @property
    def history(self) -> tuple[Transition, ...]:
        return tuple(Transition(JobState(state), at, cause) for state, at, cause in self.transitions)

    @property
    def job(self) -> Job | None:
        """The job as its trigger fired it (schedule, program, trigger context), with the notifications
        of the jobs that joined it since; None before it fired."""
        if not self.fired:
            return None
        job = from_jsonable(matching.JobTriggered, json.loads(self.fired)).job
        if not self.joined:
            return job
        joined = tuple(n for event in self.joined
                       for n in from_jsonable(checking.NotificationsJoined, json.loads(event)).notifications)
        return replace(job, context=replace(job.context, notifications=job.context.notifications + joined))


DEFAULT_FINISHED_PER_SCHEDULE = 1_000
"""Finished (LAUNCHED or DISCARDED) jobs the view keeps per schedule, the newest by creation: the
view lives in memory, and a schedule firing every minute adds 1,440 jobs a day. The log keeps them all."""


class JobsView:
    def __init__(self, snapshot_every: int | None = None,
                 finished_per_schedule: int = DEFAULT_FINISHED_PER_SCHEDULE) -> None:
        self._jobs: dict[str, JobView] = {}
        self.position = 0
        """Every event up to this position is in the view."""
        self._snapshot_every = snapshot_every or snapshots.SNAPSHOT_EVERY
        self._unsnapshotted = 0
        self._changed: set[str] = set()
        """Jobs set since the last snapshot."""
        self._writing: Future[bool] | None = None
        self._pacer: LoopPacer | None = None
        self._restored = False
        self._kept = RetainedListing(finished_per_schedule)
        """The listing order; which finished (LAUNCHED or DISCARDED) jobs stay."""

    def list(self, schedule_id: str = "") -> list[JobView]:
        """Every job (of the schedule, when given), oldest first."""
        return [job for _, job in self.listing(schedule_id)]

    def listing(self, schedule_id: str = "", pending_only: bool = False,
                after: ListingKey | None = None) -> Iterator[tuple[ListingKey, JobView]]:
        """The jobs (of the schedule, when given; only those not LAUNCHED or DISCARDED with
        `pending_only`) in listing order, with their keys: the ones after `after`. Kept sorted as jobs
        are created, so a page costs its own jobs, not the whole view's."""
        jobs = self._jobs
        return ((key, jobs[key[1]]) for key in self._kept.listing(schedule_id, after, pending_only))

    def get(self, job_id: str) -> JobView | None:
        return self._jobs.get(job_id)

    async def follow(self, log: EventLog) -> None:
        """Start from the last snapshot (unless `recover` ran), then fold every event as it commits
        (saving a snapshot every SNAPSHOT_EVERY events folded)."""
        store = snapshots_of(log)
        if not self._restored:  # else `recover` brought it up to the head before it was served
            self.restore(store)
        try:
            async for batch in log.subscribe_batches(self.position, STREAMS):  # no generator step per event
                for recorded in batch:
                    self.apply(recorded)
                    self._snapshot_if_due(store)
                    if recorded.position % 100 == 0:
                        await asyncio.sleep(0)  # a long catch-up must not starve the other services in the loop
        finally:
            if self._writing is not None:  # stopped: the snapshot being written is finished before the log closes
                self._pacer.stop()  # this thread waits for it: the packer must not wait for the loop
                wait([self._writing])

    def recover(self, log: EventLog) -> int:
        """Start from the last snapshot and fold the log up to its head (no following); events folded."""
        store = snapshots_of(log)
        self.restore(store)
        head = log.head_position()  # every event up to it is committed: the view is complete up to it
        folded = 0
        while records := log.read_all(self.position, READ_BATCH, STREAMS):
            for recorded in records:
                self.apply(recorded)
            folded += len(records)
        self.position = max(self.position, head)
        if folded >= self._snapshot_every and store.enabled:
            self.snapshot(store)  # also when few were jobs' events: the next start reads less
        return folded

    def restore(self, store: MapSnapshots) -> None:
        self._jobs, self.position, self._unsnapshotted, self._changed = {}, 0, 0, set()
        self._restored = True
        loaded = store.load()
        if loaded is not None and isinstance(loaded[1], dict):
            self.position, self._jobs = loaded
        else:
            store.rebase()
        self._index_all()

    def _index_all(self) -> None:
        with collector_paused():
            forgotten = self._kept.index((listing_key(job), job.schedule_id, job.state in FINISHED)
                                         for job in self._jobs.values())
        self._forget(forgotten)  # a snapshot of a view that kept more

    def snapshot(self, store: MapSnapshots) -> None:
        store.save(self.position, self._jobs, self._changed)
        self._unsnapshotted, self._changed = 0, set()

    def _snapshot_if_due(self, store: MapSnapshots) -> None:
        """While following: the jobs are taken here and packed and written on the snapshot thread
        (packing thousands of jobs on the loop held it too long); one at a time."""
        if self._unsnapshotted < max(self._snapshot_every, len(self._jobs)) or not store.enabled:
            return
        if self._writing is not None and not self._writing.done():
            return
        pending = store.prepare(self.position, self._jobs, self._changed)
        self._unsnapshotted, self._changed = 0, set()
        self._pacer = LoopPacer(asyncio.get_running_loop())
        self._writing = SNAPSHOT_WRITER.submit(store.write, pending, self._pacer)
        self._writing.add_done_callback(_log_failure)

    def apply(self, recorded: RecordedEvent) -> None:
        self.position = max(self.position, recorded.position)
        if recorded.type == BATCH_TYPE:
            for event in expand(recorded, TYPES):
                self._apply_one(event)
        else:
            self._apply_one(recorded)

    def _apply_one(self, recorded: RecordedEvent) -> None:
        if recorded.type not in TYPES:
            return
        self._unsnapshotted += 1
        if recorded.type not in READ_BY_FIELDS:
            self._apply_small(TYPES.decode(recorded))
            return
        try:
            # plain values, read for the few the view shows (orjson reads an integer beyond 64 bits as a
            # float: no field read here is one)
            fields = orjson.loads(recorded.data)
            at = datetime.fromisoformat(fields["at"])
            match recorded.type:
                case "JobTriggered":
                    job = fields["job"]
                    if part_of := fields.get("part_of"):  # a further job of a fire cut by size
                        self._parted(job["id"], job["schedule_id"], part_of,
                                     datetime.fromisoformat(job["created_at"]), len(job["context"]["notifications"]), at)
                    elif job["id"] not in self._jobs:  # created, matched and fired by its only notification
                        self._created(job["id"], job["schedule_id"], datetime.fromisoformat(job["created_at"]),
                                      len(job["context"]["notifications"]))
                    elif notification_id := fields.get("notification_id"):  # it stands for that notification's match
                        matched = [n for n in job["context"]["notifications"] if n["id"] == notification_id]
                        if matched:
                            self._matched(job["id"], at, matched[0])
                    self._transition(job["id"], JobState.PENDING_CONSTRAINT, at, "trigger satisfied", fired=recorded.data)
                    if fields.get("next_job_id"):  # it stands for the JobCreated of the schedule's next job
                        self._created(fields["next_job_id"], job["schedule_id"], at)
                case "JobsAdmitted":
                    forced = set(fields["forced"])
                    for job in fields["jobs"]:
                        self._transition(job["id"], JobState.PENDING_LAUNCH, at,
                                         "timed out, launch forced" if job["id"] in forced else "constraints met")
                case "JobAdmitted":
                    self._transition(fields["job"]["id"], JobState.PENDING_LAUNCH, at,
                                     "timed out, launch forced" if fields.get("forced") else "constraints met")
                case "RunRequested":
                    run_id = fields["run_id"]
                    self._transition(fields["job"]["id"], JobState.LAUNCHED, at, f"run {run_id}", run_id=run_id)
                case "NotificationMatched":
                    if fields.get("schedule_id"):  # it stands for the JobCreated of its job
                        self._created(fields["job_id"], fields["schedule_id"], at)
                    self._matched(fields["job_id"], at, fields["notification"])
                case "NotificationsJoined":
                    self._joined(fields["job_id"], fields["into"], len(fields["notifications"]), at, recorded.data)
        except DECODING_ERRORS as error:  # a field missing or of another type too
            raise UndecodableEvent(recorded, error) from error

    def _apply_small(self, event: object) -> None:
        match event:
            case matching.JobCreated(job_id, schedule_id, _, at):
                self._created(job_id, schedule_id, at)
            case matching.MissedFiresSkipped(job_id, until, policy, at):
                self._transition(job_id, JobState.PENDING_TRIGGER, at,
                                 f"fire times up to {until.isoformat()} missed: {policy.value}")
            case matching.JobDiscarded(job_id, _, reason, at):
                self._transition(job_id, JobState.DISCARDED, at, reason, reason=reason)
            case checking.JobDeferred(job_id, waiting_on, at):
                self._transition(job_id, JobState.PENDING_CONSTRAINT, at, "waiting for: " + "; ".join(waiting_on))
            case checking.JobWithdrawn(job_id, _, reason, at):
                self._transition(job_id, JobState.DISCARDED, at, reason, reason=reason)
            case backfills.ManualJobRequested(job, _, at):
                self._requested(job, at, "run now")
            case backfills.BackfillRequested(backfill_id, at=at):
                for job in backfills.jobs_of(event):
                    self._requested(job, at, f"backfill {backfill_id}")
            case backfills.BackfillCancelled(backfill_id, _, withdrawn, at):
                reason = f"backfill {backfill_id} cancelled"
                for job_id in withdrawn:
                    self._transition(job_id, JobState.DISCARDED, at, reason, reason=reason)

    def _requested(self, job: Job, at: datetime, cause: str) -> None:
        """A job a person asked for: it starts PENDING_CONSTRAINT (kept as the fire it stands for)."""
        if job.id in self._jobs:
            return
        self._changed.add(job.id)
        view = self._jobs[job.id] = JobView(
            job.id, job.schedule_id, JobState.PENDING_CONSTRAINT, at, at, fired=dumps(matching.JobTriggered(job, at)),
            notifications=len(job.context.notifications),
            transitions=((JobState.PENDING_CONSTRAINT.value, at, cause),))
        self._kept.add(listing_key(view), job.schedule_id)

    def _joined(self, job_id: str, into: str, count: int, at: datetime, event: bytes) -> None:
        self._transition(job_id, JobState.JOINED, at, f"joined job {into}, which waits for its constraints",
                         reason=f"joined job {into}")
        waiting = self._jobs.get(into)
        if waiting is None:
            return
        self._update(into, at, notifications=waiting.notifications + count, joined=(*waiting.joined, bytes(event)),
                     transitions=(*waiting.transitions, (waiting.state.value, at,
                                                         f"joined by job {job_id}: {count} more notification"
                                                         f"{'s' if count != 1 else ''}")))

    def _created(self, job_id: str, schedule_id: str, at: datetime, notifications: int = 0,
                 cause: str = "first matching notification") -> None:
        if job_id in self._jobs:
            return
        self._changed.add(job_id)
        view = self._jobs[job_id] = JobView(
            job_id, schedule_id, JobState.PENDING_TRIGGER, at, at, notifications=notifications,
            transitions=((JobState.PENDING_TRIGGER.value, at, cause),))
        self._kept.add(listing_key(view), schedule_id)

    def _parted(self, job_id: str, schedule_id: str, part_of: str, created_at: datetime, count: int,
                at: datetime) -> None:
        """A job that a fire too big for one job message made beside `part_of`, with `count` of the
        notifications `part_of` matched."""
        self._created(job_id, schedule_id, created_at, count, f"part of job {part_of}'s fire, cut by size")
        first = self._jobs.get(part_of)
        if first is not None:
            self._update(part_of, at, notifications=max(0, first.notifications - count))

    def _matched(self, job_id: str, at: datetime, notification: dict) -> None:
        view = self._jobs[job_id]
        self._update(job_id, at, notifications=view.notifications + 1,
                     partitions=_counted(view.partitions, notification["payload"]))

    def _transition(self, job_id: str, state: JobState, at: datetime, cause: str, **changes: object) -> None:
        view = self._jobs.get(job_id)
        if view is None:
            return
        self._update(job_id, at, state=state, transitions=(*view.transitions, (state.value, at, cause)), **changes)
        if state in FINISHED and view.state not in FINISHED:
            self._forget(self._kept.finish(listing_key(view), view.schedule_id))

    def _forget(self, job_ids: list[str]) -> None:
        for job_id in job_ids:
            del self._jobs[job_id]
            self._changed.add(job_id)

    def _update(self, job_id: str, at: datetime, *, state: JobState | None = None, fired: bytes | None = None,
                reason: str | None = None, run_id: str | None = None, notifications: int | None = None,
                partitions: tuple | None = None, joined: tuple | None = None,
                transitions: tuple | None = None) -> None:
        """The job with `updated_at` and the given fields changed. Built field by field: dataclasses.replace
        (a field walk and a keyword call) was the biggest part of the view's work per event."""
        self._changed.add(job_id)
        view = self._jobs[job_id]
        self._jobs[job_id] = JobView(
            view.id, view.schedule_id, view.state if state is None else state, view.created_at, at,
            view.fired if fired is None else fired, view.reason if reason is None else reason,
            view.run_id if run_id is None else run_id,
            view.notifications if notifications is None else notifications,
            view.partitions if partitions is None else partitions, view.joined if joined is None else joined,
            view.transitions if transitions is None else transitions)


def _counted(counts: tuple[tuple[str, str, int], ...], payload: dict) -> tuple[tuple[str, str, int], ...]:
    """`counts` with a partition notification's partitions added to its dataset's."""
    if "partitions" not in payload:
        return counts
    namespace, dataset, added = payload["namespace"], payload["dataset"], len(payload["partitions"])
    for index, (ns, ds, count) in enumerate(counts):
        if (ns, ds) == (namespace, dataset):
            return (*counts[:index], (ns, ds, count + added), *counts[index + 1:])
    return (*counts, (namespace, dataset, added))


FINISHED = frozenset({JobState.LAUNCHED, JobState.DISCARDED, JobState.JOINED})


def listing_key(job: JobView) -> ListingKey:
    return epoch_micros(job.created_at), job.id


def snapshots_of(log: EventLog) -> MapSnapshots:
    return MapSnapshots(log, SNAPSHOT, Schema(dict[str, JobView], SNAPSHOT_VERSION))


def _log_failure(writing: Future[bool]) -> None:
    if not writing.cancelled() and writing.exception() is not None:  # the next one is tried all the same
        logging.getLogger(__name__).warning("jobs view snapshot not saved: %r", writing.exception())
