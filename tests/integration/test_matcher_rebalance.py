"""Matcher instances share the load through Kafka consumer groups, and a member joining or
leaving (a rebalance) loses and duplicates nothing: two members start, a third joins halfway,
one leaves; every (schedule, notification) pair is matched exactly once and every schedule fires
as often as a single matcher fed the same notifications (the oracle)."""
from __future__ import annotations

import asyncio
import contextlib
import random
from collections import Counter, defaultdict
from dataclasses import replace
from datetime import datetime, timezone

import pytest

from sluice.eventlog.batched import expand_all
from sluice.bus.kafka import KafkaBus
from sluice.bus.topics import PARTITION_NOTIFICATIONS, partition_event_key
from sluice.clock import SimulatedClock
from sluice.domain.common import Notification, PartitionCommitted, PartitionRef, ProgramRef
from sluice.domain.matching import JobCreated, JobTriggered, NotificationMatched
from sluice.domain.schedules import Schedule, schedule_id_for
from sluice.domain.triggers import AndTrigger, PartitionTrigger
from sluice.eventlog.postgres import PostgresEventLog
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.runtime.service import run_services
from tests.support.kafka import KafkaBroker
from tests.support.matcher_inputs import MatcherInputs
from sluice.wire.common import notification_to_proto
from sluice_services.composition import matcher_spec, registry_spec
from sluice_services.matcher.service import TYPES, MatcherService
from sluice_services.registry.service import RegistryService

pytestmark = [pytest.mark.integration, pytest.mark.slow]

T0 = datetime(2026, 11, 22, tzinfo=timezone.utc)
DATASETS = 24
PHASE = 150
PROGRAM = ProgramRef("ns", "app", "p")


def workload_schedules() -> list[Schedule]:
    found = []
    for index in range(DATASETS):
        for count in (1, 3):
            found.append(Schedule("", f"d{index}-x{count}", PROGRAM, PartitionTrigger("ns", f"d{index}", count),
                                  enabled=True))
        other = (index + 7) % DATASETS  # an AND across datasets that hash to different partitions
        found.append(Schedule("", f"d{index}-and-d{other}", PROGRAM,
                              AndTrigger((PartitionTrigger("ns", f"d{index}"), PartitionTrigger("ns", f"d{other}"))),
                              enabled=True))
    return [replace(s, id=schedule_id_for(s.program, s.name)) for s in found]


def notifications(count: int, rng: random.Random) -> list[Notification]:
    return [Notification(f"n-{index}", T0, PartitionCommitted(
        "ns", f"d{rng.randrange(DATASETS)}", (PartitionRef({"i": str(index)}, f"/d/{index}"),)))
        for index in range(count)]


async def oracle(tmp_path, schedules: list[Schedule], sent: list[Notification]) -> tuple[Counter, Counter]:
    """A single matcher, its records handed to its bus handlers one by one, no broker: how many
    notifications each schedule matches and how often it fires."""
    clock = SimulatedClock(T0)
    log = SqliteEventLog(tmp_path / "oracle.db", clock=clock)
    inputs = MatcherInputs(MatcherService(log, clock))
    for schedule in schedules:
        await inputs.observe(schedule.id, schedule)
    for notification in sent:
        await inputs.match(notification)
    matched, fired = outcome(log)
    log.close()
    return Counter(s for s, _ in matched), fired


def outcome(log) -> tuple[list[tuple[str, str]], Counter]:
    """(schedule, notification) of every match, and the fires per schedule, from the log."""
    matched, jobs = matches_and_jobs(log)
    return matched, Counter({schedule_id: len(fired) for schedule_id, fired in jobs.items()})


def matches_and_jobs(log) -> tuple[list[tuple[str, str]], dict[str, list]]:
    job_schedule, matched, jobs = {}, [], defaultdict(list)
    after = 0
    while events := log.read_all(after, 5000):
        after = events[-1].position
        for recorded in expand_all(events):
            if recorded.type not in ("JobCreated", "NotificationMatched", "JobTriggered"):
                continue
            event = TYPES.decode(recorded)
            if isinstance(event, JobCreated):
                job_schedule[event.job_id] = event.schedule_id
            elif isinstance(event, NotificationMatched):
                if event.schedule_id:  # the match that created the job
                    job_schedule[event.job_id] = event.schedule_id
                matched.append((job_schedule[event.job_id], event.notification.id))
            elif isinstance(event, JobTriggered):
                if event.notification_id:  # the fire stands for its last match
                    matched.append((event.job.schedule_id, event.notification_id))
                jobs[event.job.schedule_id].append(event.job)
    return matched, jobs


class Member:
    """One matcher process's worth: its own log connection, Kafka clients and services."""

    def __init__(self, dsn: str, bootstrap: str, clock) -> None:
        self.log = PostgresEventLog(dsn, clock=clock)
        self.bus = KafkaBus(bootstrap)
        self.stop = asyncio.Event()
        self.ready = asyncio.get_running_loop().create_future()
        producer = self.bus.producer()
        self.task = asyncio.create_task(run_services([matcher_spec(self.log, clock, producer)], self.bus, self.log,
                                                     on_ready=self.ready.set_result, stop=self.stop))

    async def leave(self) -> None:
        self.stop.set()
        await asyncio.wait_for(self.task, 60)
        await self.bus.close()
        self.log.close()


async def test_members_joining_and_leaving_lose_and_duplicate_nothing(tmp_path, postgres):
    rng = random.Random(7)
    clock = SimulatedClock(T0)
    schedules = workload_schedules()
    sent = notifications(3 * PHASE, rng)
    expected_matched, expected_fired = await oracle(tmp_path, schedules, sent)

    dsn = postgres.create_database()
    log = PostgresEventLog(dsn, clock=clock)
    registry = RegistryService(log, clock)
    for schedule in schedules:
        registry.create(schedule)
    with KafkaBroker() as kafka:
        bus = KafkaBus(kafka.bootstrap)
        producer = bus.producer()
        stop_registry = asyncio.Event()
        publisher = asyncio.create_task(run_services([registry_spec(log, clock, producer)], bus, log, stop=stop_registry))
        members = [Member(dsn, kafka.bootstrap, clock), Member(dsn, kafka.bootstrap, clock)]
        try:
            await asyncio.wait_for(asyncio.gather(*(m.ready for m in members)), 90)

            async def publish(batch: list[Notification]) -> None:
                for notification in batch:
                    payload = notification.payload
                    await producer.send(PARTITION_NOTIFICATIONS, notification_to_proto(notification).SerializeToString(),
                                        key=partition_event_key(payload.namespace, payload.dataset).encode())

            await publish(sent[:PHASE])
            members.append(Member(dsn, kafka.bootstrap, clock))       # a third joins
            await asyncio.wait_for(members[-1].ready, 90)
            await publish(sent[PHASE:2 * PHASE])
            await members.pop(0).leave()                              # one leaves
            await publish(sent[2 * PHASE:])

            deadline = asyncio.get_running_loop().time() + 180
            while True:
                matched, fired = outcome(log)
                if len(matched) >= sum(expected_matched.values()) or asyncio.get_running_loop().time() > deadline:
                    break
                await asyncio.sleep(1)
            await asyncio.sleep(3)  # anything duplicated late would show now
            matched, jobs = matches_and_jobs(log)
            fired = Counter({schedule_id: len(fired) for schedule_id, fired in jobs.items()})
        finally:
            for member in members:
                with contextlib.suppress(Exception):
                    await member.leave()
            stop_registry.set()
            await publisher
            await bus.close()
    log.close()

    assert len(matched) == len(set(matched)), "a notification was matched twice for one schedule"
    assert Counter(s for s, _ in matched) == expected_matched, "a notification was lost"
    # A single dataset's notifications keep their order on their partition, so those schedules fire
    # exactly as the oracle's; an AND's inputs interleave differently, so only its shape is checked.
    single = {s.id for s in schedules if isinstance(s.trigger, PartitionTrigger)}
    assert {k: v for k, v in fired.items() if k in single} == {k: v for k, v in expected_fired.items() if k in single}
    for schedule in schedules:
        if schedule.id not in single:
            legs = {leaf.dataset for leaf in schedule.trigger.all_of}
            assert all({n.payload.dataset for n in job.context.notifications} == legs for job in jobs[schedule.id])
    assert sum(fired.values()) > 300
