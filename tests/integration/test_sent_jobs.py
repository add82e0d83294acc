"""The jobs a matcher routes, taken by the checker and the alerts service of its process instead of parsed
(sluice.wire.sent_jobs): the same messages on the bus and the same events in the log as when each
consumer parses them, as over Kafka in processes of their own."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from sluice.bus.inprocess import InProcessBus
from sluice.bus.port import Record
from sluice.bus.topics import JOBS
from sluice.clock import SimulatedClock
from sluice.domain.common import Notification, PartitionCommitted, PartitionRef, ProgramRef
from sluice.domain.constraints.specs import ConcurrencyConstraint
from sluice.domain.jobs import Job, TriggerContext
from sluice.domain.schedules import Schedule
from sluice.domain.triggers import PartitionTrigger, TimeTrigger
from sluice.eventlog.batched import expand_all
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.wire.jobs import job_triggered
from sluice.wire.sent_jobs import SentJobs
from sluice_services.alerts.service import AlertsService
from sluice_services.catalogue import CHECKER, MATCHER
from sluice_services.checker.service import CheckerService
from sluice_services import composition
from sluice_services.composition import sent_jobs_for
from sluice_services.matcher.service import MatcherService
from tests.support.matcher_inputs import MatcherInputs

MINUTE = datetime(2026, 11, 28, 12, 30, tzinfo=timezone.utc)
PROGRAM = ProgramRef("experiments", "clickstream", "hourly_metrics")
SCHEDULES = [
    Schedule("s-cron", "cron", PROGRAM, TimeTrigger("30 12 * * *"), enabled=True, properties={"team": "growth"},
             spark_conf={"spark.executor.memory": "2g"}, constraints=(ConcurrencyConstraint(2),)),
    Schedule("s-plain", "plain", PROGRAM, TimeTrigger("30 12 * * *"), enabled=True),
    Schedule("s-partition", "partition", PROGRAM, PartitionTrigger("experiments", "clickstream", 1), enabled=True),
]


class Stack:
    """A matcher and the checker and alerts consuming its jobs on one log, with or without a SentJobs."""

    def __init__(self, path: Path, shared: bool) -> None:
        self.clock = SimulatedClock(MINUTE - timedelta(minutes=1))
        self.log = SqliteEventLog(path, clock=self.clock)
        self.sent_jobs = SentJobs(readers=2) if shared else None
        self.matcher = MatcherService(self.log, self.clock, self.sent_jobs)
        self.checker = CheckerService(self.log, self.clock, sent_jobs=self.sent_jobs)
        self.alerts = AlertsService(self.log, self.clock, sent_jobs=self.sent_jobs)
        self.inputs = MatcherInputs(self.matcher)
        self.routed: list[bytes] = []
        self._after = 0

    async def run(self) -> None:
        for schedule in SCHEDULES:
            await self.inputs.observe(schedule.id, schedule)
        await self.inputs.match(Notification("n-1", self.clock.now(), PartitionCommitted(
            "experiments", "clickstream", (PartitionRef({"hour": "11"}, "/d/11"),))))
        self.clock.set(MINUTE)
        self.matcher.fire_due()
        records = self.route()
        for consumer in (self.checker, self.alerts):
            handler = consumer.handlers()[JOBS]
            await handler.apply([(record, handler.parse(record)) for record in records])

    async def fire_the_crons(self) -> None:
        for schedule in SCHEDULES[:2]:
            await self.inputs.observe(schedule.id, schedule)
        self.clock.set(MINUTE)
        self.matcher.fire_due()

    def route(self) -> list[Record]:
        """The matcher's relay: its new events routed, each message as the bus delivers it (a copy of the bytes)."""
        records = []
        for recorded in self.log.read_all(self._after, 1000, MATCHER.stream_prefixes):
            self._after = recorded.position
            for message in self.matcher.route(recorded):
                self.routed.append(message.value)
                records.append(Record(JOBS, 0, len(records), message.key.encode(), bytes(bytearray(message.value)),
                                      (), 0))
        return records

    def events(self, prefixes: tuple[str, ...]) -> list[tuple[str, int, str, bytes]]:
        return [(r.stream, r.version, r.type, r.data) for r in expand_all(self.log.read_all(0, 10_000, prefixes))]


async def test_consumers_beside_the_matcher_take_its_jobs_and_write_what_parsing_them_writes(tmp_path):
    shared, alone = Stack(tmp_path / "shared.db", shared=True), Stack(tmp_path / "alone.db", shared=False)
    await shared.run()
    await alone.run()

    assert len(shared.routed) == 3  # both crons and the partition's fire
    assert shared.routed == alone.routed
    assert shared.events(MATCHER.stream_prefixes) == alone.events(MATCHER.stream_prefixes)
    assert shared.events(CHECKER.stream_prefixes) == alone.events(CHECKER.stream_prefixes)
    assert shared.events(("alerts",)) == alone.events(("alerts",))
    assert len(shared.sent_jobs) == 0  # each message taken by both readers, then dropped


async def test_each_consumer_takes_a_job_once_then_parses_the_same_bytes_again(tmp_path):
    stack = Stack(tmp_path / "events.db", shared=True)
    await stack.fire_the_crons()
    records = stack.route()
    assert len(stack.sent_jobs) == 2
    taken = [stack.checker.parse_job_triggered(record).job for record in records]
    assert taken == [job_triggered(record.value) for record in records]
    assert len(stack.sent_jobs) == 2  # the alerts service has not taken them yet
    for record in records:
        stack.alerts.parse_job_triggered(record)
    assert len(stack.sent_jobs) == 0

    again = stack.checker.parse_job_triggered(records[0]).job  # redelivered: parsed
    assert again == taken[0] and again is not taken[0]


async def test_a_restarted_matcher_routes_from_the_events_what_its_predecessor_fired(tmp_path):
    stack = Stack(tmp_path / "events.db", shared=True)
    await stack.fire_the_crons()
    restarted = MatcherService(stack.log, stack.clock, SentJobs(readers=1))
    restarted.recover()
    stack.matcher = restarted
    from_events = [record.value for record in stack.route()]

    again = Stack(tmp_path / "again.db", shared=True)
    await again.fire_the_crons()
    assert from_events == [record.value for record in again.route()] and len(from_events) == 2


def test_a_process_shares_one_only_with_a_matcher_and_a_consumer_of_its_jobs():
    assert sent_jobs_for(("registry", "matcher", "checker", "alerts")) is not None
    assert sent_jobs_for(("matcher",)) is None and sent_jobs_for(("checker", "alerts")) is None
    job = Job("j-1", "s-cron", 1, PROGRAM, TriggerContext("s-cron", "cron"), MINUTE)
    both = sent_jobs_for(("matcher", "checker", "alerts"))  # each consumer takes it
    both.sent(b"m", job)
    assert both.taken(b"m") is job and both.taken(b"m") is job and both.taken(b"m") is None


async def test_embedded_mode_shares_one_between_the_matcher_the_checker_and_the_alerts_service(tmp_path):
    clock = SimulatedClock(MINUTE - timedelta(minutes=1))
    log, bus = SqliteEventLog(tmp_path / "events.db", clock=clock), InProcessBus(clock=clock)
    specs = {spec.name: spec for spec in composition.build(composition.SERVICES, log, bus, clock,
                                                           composition.Settings(data_dir=tmp_path), bus.producer())}
    matcher: MatcherService = specs["matcher"].route.__self__
    checker: CheckerService = specs["checker"].route.__self__
    alerts = next(task.__self__ for task in specs["alerts"].background if isinstance(task.__self__, AlertsService))
    inputs = MatcherInputs(matcher)
    for schedule in SCHEDULES[:2]:
        await inputs.observe(schedule.id, schedule)
    clock.set(MINUTE)
    matcher.fire_due()
    one, other = [Record(JOBS, 0, 0, message.key.encode(), message.value, (), 0)
                  for recorded in log.read_all(0, 1000, MATCHER.stream_prefixes) for message in matcher.route(recorded)]

    taken = checker.parse_job_triggered(one).job
    assert checker.parse_job_triggered(one).job is taken  # the matcher's job, kept for a second reader

    first = checker.parse_job_triggered(other).job
    alerts.parse_job_triggered(other)  # the second reader
    again = checker.parse_job_triggered(other).job
    assert again == first and again is not first  # both took it: parsed
    log.close()
