"""What the checker keeps of the jobs people asked for (sluice.domain.backfills): each backfill's
progress, moved by the checker's own events (a job admitted, withdrawn, its run ended), and the ids
given to request ids."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Mapping

import immutables

from sluice.domain.backfills import Backfill, BackfillCancelled, BackfillRequested, ManualJobRequested


@dataclass(frozen=True)
class RequestBook:
    """What the checker keeps of requested jobs: each backfill's progress, which backfill a queued
    job or a running run belongs to, and the ids given to request ids (idempotent requests)."""

    backfills: Mapping[str, Backfill] = field(default_factory=immutables.Map)
    queued: Mapping[str, str] = field(default_factory=immutables.Map)
    """Job id -> its backfill, while the job waits in the queue."""
    running: Mapping[str, str] = field(default_factory=immutables.Map)
    """Run id -> its backfill, from the job's admission to the run's end."""
    requests: Mapping[str, str] = field(default_factory=immutables.Map)
    """Request id (per schedule) -> the job or backfill it made."""
    fingerprints: Mapping[str, str] = field(default_factory=immutables.Map)
    """Request id (per schedule) -> its request's fingerprint (none for requests recorded before they were kept)."""
    manual_jobs: int = 0
    count: int = 0
    """Backfills requested: numbers the ids of those without a request id."""

    def __post_init__(self) -> None:
        for name in ("backfills", "queued", "running", "requests", "fingerprints"):
            if not isinstance(getattr(self, name), immutables.Map):
                object.__setattr__(self, name, immutables.Map(getattr(self, name)))

    def requested(self, kind: str, schedule_id: str, request_id: str) -> str | None:
        return self.requests.get(f"{kind}/{schedule_id}/{request_id}") if request_id else None

    def differs(self, kind: str, schedule_id: str, request_id: str, fingerprint: str) -> bool:
        """Whether the request first given this request id asked for something else (unknown: it did not)."""
        recorded = self.fingerprints.get(f"{kind}/{schedule_id}/{request_id}")
        return recorded is not None and recorded != fingerprint

    def _with_request(self, key: str, made: str, fingerprint: str) -> RequestBook:
        fingerprints = self.fingerprints.set(key, fingerprint) if fingerprint else self.fingerprints
        return replace(self, requests=self.requests.set(key, made), fingerprints=fingerprints)

    def with_manual_job(self, event: ManualJobRequested) -> RequestBook:
        book = self
        if event.request_id:
            book = self._with_request(f"run/{event.job.schedule_id}/{event.request_id}", event.job.id, event.fingerprint)
        return replace(book, manual_jobs=self.manual_jobs + 1)

    def with_backfill(self, event: BackfillRequested) -> RequestBook:
        template = event.template
        backfill = Backfill(event.backfill_id, template.schedule_id, event.start, event.end, event.keys, event.at,
                            len(event.items), len(event.items), request_id=event.request_id)
        queued = self.queued
        with queued.mutate() as editing:
            for item in event.items:
                editing[item.job_id] = event.backfill_id
            queued = editing.finish()
        book = self
        if event.request_id:
            book = self._with_request(f"backfill/{template.schedule_id}/{event.request_id}", event.backfill_id,
                                      event.fingerprint)
        return replace(book, backfills=self.backfills.set(event.backfill_id, backfill), queued=queued,
                       count=self.count + 1)

    def admitted(self, job_id: str, run_id: str) -> RequestBook:
        backfill_id = self.queued.get(job_id)
        if backfill_id is None:
            return self
        backfill = self.backfills[backfill_id]
        return replace(self, queued=self.queued.delete(job_id), running=self.running.set(run_id, backfill_id),
                       backfills=self.backfills.set(backfill_id, replace(backfill, waiting=backfill.waiting - 1,
                                                                         running=backfill.running + 1)))

    def withdrawn(self, job_id: str) -> RequestBook:
        backfill_id = self.queued.get(job_id)
        if backfill_id is None:
            return self
        backfill = self.backfills[backfill_id]
        return replace(self, queued=self.queued.delete(job_id),
                       backfills=self.backfills.set(backfill_id, replace(backfill, waiting=backfill.waiting - 1,
                                                                         discarded=backfill.discarded + 1)))

    def run_ended(self, run_id: str, completed: bool) -> RequestBook:
        backfill_id = self.running.get(run_id)
        if backfill_id is None:
            return self
        backfill = self.backfills[backfill_id]
        ended = replace(backfill, running=backfill.running - 1, done=backfill.done + 1,
                        failed=backfill.failed + (0 if completed else 1))
        return replace(self, running=self.running.delete(run_id), backfills=self.backfills.set(backfill_id, ended))

    def cancelled(self, event: BackfillCancelled) -> RequestBook:
        backfill = self.backfills[event.backfill_id]
        queued = self.queued
        with queued.mutate() as editing:
            for job_id in event.withdrawn:
                editing.pop(job_id, None)
            queued = editing.finish()
        count = len(event.withdrawn)
        cancelled = replace(backfill, cancelled_at=event.at, waiting=backfill.waiting - count,
                            discarded=backfill.discarded + count)
        return replace(self, queued=queued, backfills=self.backfills.set(event.backfill_id, cancelled))

    def waiting_jobs(self, backfill_id: str) -> list[str]:
        return [job_id for job_id, owner in self.queued.items() if owner == backfill_id]
