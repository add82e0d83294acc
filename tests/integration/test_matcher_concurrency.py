"""One pending job per schedule, also when two matcher instances handle the two inputs of an AND
trigger at the same instant: each instance writes with the expected version of the schedule's
partition stream, the loser reads what the winner wrote and decides again, so both notifications land in the same job, which fires once."""
from __future__ import annotations

import asyncio
import threading
import uuid
from dataclasses import replace
from datetime import datetime, timezone
from typing import Callable

import pytest

from sluice.bus.topics import PARTITION_NOTIFICATIONS
from sluice.clock import SimulatedClock
from sluice.domain.common import Notification, PartitionCommitted, PartitionRef, ProgramRef
from sluice.domain.matching import JobTriggered, NotificationMatched, stream_name
from sluice.domain.schedules import Schedule, schedule_id_for
from sluice.domain.triggers import AndTrigger, PartitionTrigger
from sluice.eventlog.batched import expand_all
from sluice.eventlog.port import EventLog
from sluice.eventlog.postgres import PostgresEventLog
from sluice.eventlog.sqlite import SqliteEventLog
from sluice_services.matcher.service import TYPES, MatcherService
from tests.support.matcher_inputs import MatcherInputs

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 22, tzinfo=timezone.utc)
ROUNDS = 25
PROGRAM = ProgramRef("ns", "app", "join")
SCHEDULE = Schedule(schedule_id_for(PROGRAM, "join"), "join", PROGRAM,
                    AndTrigger((PartitionTrigger("ns", "left", 1), PartitionTrigger("ns", "right", 1))), enabled=True)


@pytest.fixture(params=["sqlite", "postgres"])
def open_log(request, tmp_path) -> Callable[[], EventLog]:
    """Each call opens another instance on the same store, as a second process would."""
    if request.param == "sqlite":
        return lambda: SqliteEventLog(tmp_path / "events.db", clock=SimulatedClock(T0))
    dsn = request.getfixturevalue("postgres").create_database()
    return lambda: PostgresEventLog(dsn, clock=SimulatedClock(T0))


def partition(dataset: str) -> Notification:
    return Notification(str(uuid.uuid4()), T0, PartitionCommitted("ns", dataset, (PartitionRef({"d": dataset}, f"/{dataset}"),)))


def test_the_two_inputs_of_an_and_trigger_at_once_make_one_job(open_log):
    logs = [open_log(), open_log()]
    try:
        matchers = [MatcherService(log, SimulatedClock(T0)) for log in logs]
        feeds = [MatcherInputs(matcher) for matcher in matchers]
        for matcher, feed in zip(matchers, feeds):
            matcher.recover()
            asyncio.run(feed.observe(SCHEDULE.id, SCHEDULE))
        for round_ in range(ROUNDS):
            start = threading.Barrier(2)
            inputs = [partition("left"), partition("right")]

            def deliver(member: int, notification: Notification) -> None:
                """Each instance its own matches partition (the schedule's old and new owner during a
                rebalance) and source offset: only the schedule's stream is shared."""
                records = [replace(record, partition=member) for record in
                           feeds[member].match_records(notification, PARTITION_NOTIFICATIONS, round_)]
                start.wait()
                asyncio.run(feeds[member].deliver(records))

            threads = [threading.Thread(target=deliver, args=pair) for pair in enumerate(inputs)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
        events = [TYPES.decode(r) for r in expand_all(logs[0].read_all(0, 10_000))
                  if r.stream == stream_name(SCHEDULE.id)]
        created = [e for e in events if isinstance(e, NotificationMatched) and e.schedule_id]  # first matches
        fired = [e for e in events if isinstance(e, JobTriggered)]
        assert len(created) == len(fired) == ROUNDS
        assert len({e.job.id for e in fired}) == ROUNDS
        for job in (e.job for e in fired):
            assert sorted(n.payload.dataset for n in job.context.notifications) == ["left", "right"]
    finally:
        for log in logs:
            log.close()
