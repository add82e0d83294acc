"""The constraint-checker: admits triggered jobs and asks the launcher to launch them."""
from __future__ import annotations

from sluice.bus.port import Record
from sluice.bus.topics import LAUNCH_REQUESTS
from sluice.clock import Clock
from sluice.domain import admission
from sluice.domain.admission import AdmissionState, CheckJob, JobAdmitted
from sluice.domain.codec import EventTypes
from sluice.eventlog.port import EventLog, RecordedEvent
from sluice.runtime.aggregates import AggregateStore, catch_up, execute
from sluice.runtime.errors import MalformedMessage
from sluice.runtime.outbox import Outgoing
from sluice.v1 import jobs_pb2
from sluice.wire.common import parse_bus_message
from sluice.wire.jobs import job_from_proto, job_to_proto

STREAM_PREFIX = "job-"
TYPES = EventTypes(admission.EVENTS)


class CheckerService:
    def __init__(self, log: EventLog, clock: Clock) -> None:
        self._log = log
        self._clock = clock
        self._store: AggregateStore[AdmissionState] = AggregateStore(log, TYPES, admission.evolve, AdmissionState())

    def recover(self) -> None:
        catch_up(self._log, self._store, STREAM_PREFIX, TYPES)

    async def on_job_triggered(self, record: Record) -> None:
        message = parse_bus_message(jobs_pb2.JobTriggered, record.value)
        if not message.job.id or not message.job.schedule_id:
            raise MalformedMessage("job.id and job.schedule_id are required")
        job = job_from_proto(message.job)
        now = self._clock.now()
        execute(self._store, self._log, admission.stream_name(job.id), lambda s: admission.decide(s, CheckJob(job), now))

    def route(self, recorded: RecordedEvent) -> list[Outgoing]:
        if recorded.type != JobAdmitted.__name__ or not recorded.stream.startswith(STREAM_PREFIX):
            return []
        event: JobAdmitted = TYPES.decode(recorded)
        message = jobs_pb2.LaunchRequested(job=job_to_proto(event.job))
        return [Outgoing(LAUNCH_REQUESTS, event.job.id, message.SerializeToString())]
