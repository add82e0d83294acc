"""The jobs a process sent on the bus, by the bytes of their message, for its own consumers of them.

In embedded mode the matcher, the checker and the alerts service share a process: the matcher's route
encodes each fired job as a JobTriggered, the in-process bus carries the bytes, and each consumer
parsed them back into a job equal to the one the matcher had. With a SentJobs shared by the three
(sluice_services.composition.build), a consumer takes the sender's job for the same bytes instead.
Equal bytes are the same message, so what it takes is what it would have parsed. A miss (another
process sent it, a restart, a consumer far behind) parses as before: over Kafka, in separate
processes, every record misses and costs a dictionary lookup.
"""
from __future__ import annotations

from collections import OrderedDict

from sluice.domain.jobs import Job
from sluice.wire.jobs import job_triggered

KEPT = 131_072
"""Messages kept at most (~1.2 KB each with their job), the oldest dropped first. A relay publishes a page
of the log before its consumers take any: 500 of the matcher's batch records hold up to ~35,000 fires, and
a minute's burst of 100,000 crons is routed in three pages."""
KEPT_BYTES = 4096
"""A larger message (a context of many notifications, up to the bus's limit) is not kept: it is parsed,
so what is kept stays within KEPT * KEPT_BYTES of messages."""


class SentJobs:
    def __init__(self, readers: int, kept: int = KEPT) -> None:
        """`readers`: the consumers of the jobs topic in this process; a message is dropped once each took it."""
        if readers < 1:
            raise ValueError(f"readers must be at least 1, got {readers}")
        self._readers = readers
        self._kept = kept
        self._jobs: OrderedDict[bytes, list] = OrderedDict()
        """message bytes -> [job, takes left]"""

    def sent(self, message: bytes, job: Job) -> None:
        """`message` is the JobTriggered of `job`, as the route published it."""
        if len(message) > KEPT_BYTES:
            return
        jobs = self._jobs
        jobs[message] = [job, self._readers]
        if len(jobs) > self._kept:
            jobs.popitem(last=False)

    def taken(self, message: bytes) -> Job | None:
        """The job sent as these bytes, or None (parse them)."""
        entry = self._jobs.get(message)
        if entry is None:
            return None
        entry[1] -= 1
        if entry[1] <= 0:
            self._jobs.pop(message, None)
        return entry[0]

    def __len__(self) -> int:
        return len(self._jobs)


def job_received(message: bytes, sent_jobs: SentJobs | None) -> Job:
    """The job of a JobTriggered message off the bus: the one this process sent as these bytes, else
    parsed (MalformedMessage when it is not one)."""
    job = sent_jobs.taken(message) if sent_jobs is not None else None
    return job if job is not None else job_triggered(message)
