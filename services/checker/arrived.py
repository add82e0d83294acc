"""The launch requests of jobs admitted as they arrived, kept from their JobTriggered messages.

A job admitted unchanged (not joined: its JobsAdmitted holds the very Job parsed from its message)
goes to the launcher as the same Job message: the checker's route takes it from here instead of
decoding the JobsAdmitted's JSON and encoding the job again. A JobTriggered and a LaunchRequested
are both `Job job = 1` alone (SAME_SHAPE), so the bytes that arrived are the launch request's. The
route still runs on the event read back from the log, after its append committed, and finds its
launches by its stream version, which only that committed append can hold. Whatever is not here (a
job joined or queued first, a restart, a relay far behind) is routed from the event as before.
"""
from __future__ import annotations

from typing import Sequence

from sluice.bus.topics import LAUNCH_REQUESTS
from sluice.domain.checking import JobsAdmitted
from sluice.domain.jobs import Job
from sluice.runtime.outbox import Outgoing
from sluice.v1 import jobs_pb2

SAME_SHAPE = [(f.name, f.number, f.message_type) for f in jobs_pb2.JobTriggered.DESCRIPTOR.fields] \
    == [(f.name, f.number, f.message_type) for f in jobs_pb2.LaunchRequested.DESCRIPTOR.fields]
"""Else nothing is kept: every launch request is built from its event."""
KEPT = 4096
"""Jobs arrived and not decided yet kept at most (a poll's: the consumer's polls are smaller)."""
KEPT_BYTES = 4096
"""A larger message (a context of many notifications, up to the bus's 256 KiB) is not kept: its launch
request is built from its event, so what is kept stays within KEPT * KEPT_BYTES."""
LAUNCHES_KEPT_BYTES = 16 * 2**20
"""Launch requests admitted and not routed yet kept at most, counted as their messages plus
LAUNCH_OVERHEAD each: a relay behind a burst (a minute's thousands of crons all admitted before the
relay routes the first) still finds them; past this the oldest are built from their events."""
LAUNCH_OVERHEAD = 512
"""Bytes a kept launch request costs beside its message: its entry, key and Outgoing."""


class ArrivedJobs:
    def __init__(self, kept: int = KEPT, launches_kept_bytes: int = LAUNCHES_KEPT_BYTES) -> None:
        self._kept = kept
        self._launches_kept_bytes = launches_kept_bytes
        self._launch_bytes = 0
        """What the kept launch requests count (LAUNCHES_KEPT_BYTES)."""
        self._arrived: dict[int, tuple[Job, bytes]] = {}
        """id(job) -> (the job parsed, its JobTriggered's bytes), until a decision appended."""
        self._launches: dict[int, list[Outgoing | None]] = {}
        """Queue stream version of a JobsAdmitted -> the launch request of each of its jobs (None: not kept)."""

    def keep(self, job: Job, triggered: bytes) -> None:
        """`job` parsed from the JobTriggered `triggered`."""
        if not SAME_SHAPE or len(triggered) > KEPT_BYTES:
            return
        if len(self._arrived) >= self._kept:
            self._arrived.clear()
        self._arrived[id(job)] = (job, triggered)

    def appended(self, events: Sequence[object], last_version: int) -> None:
        """The events one decision appended to the queue stream, the last at `last_version`."""
        first = last_version - len(events) + 1
        for offset, event in enumerate(events):
            if type(event) is JobsAdmitted:
                launches = [Outgoing(LAUNCH_REQUESTS, job.id, arrived[1])
                            if (arrived := self._arrived.get(id(job))) is not None and arrived[0] is job else None
                            for job in event.jobs]
                if any(launches):
                    self._keep_launches(first + offset, launches)
        self._arrived.clear()

    def launches_at(self, version: int) -> list[Outgoing | None] | None:
        """The launch requests of the JobsAdmitted at this version of the queue stream (None for a job
        not kept), once; None when none was kept."""
        launches = self._launches.pop(version, None)
        if launches is not None:
            self._launch_bytes -= _bytes(launches)
        return launches

    def _keep_launches(self, version: int, launches: list[Outgoing | None]) -> None:
        size = _bytes(launches)
        while self._launch_bytes + size > self._launches_kept_bytes and self._launches:
            self._launch_bytes -= _bytes(self._launches.pop(next(iter(self._launches))))
        if size > self._launches_kept_bytes:  # larger alone than the bound: not kept
            return
        self._launch_bytes += size
        self._launches[version] = launches


def _bytes(launches: list[Outgoing | None]) -> int:
    return sum(len(launch.value) + LAUNCH_OVERHEAD for launch in launches if launch is not None)
