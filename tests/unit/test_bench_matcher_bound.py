"""matcher-bound counts as the matcher does: on the matcher benchmark's records, the fires it
records are the matcher's JobTriggered events (schedule, job number), so its figure bounds the same work."""
from __future__ import annotations

import asyncio
import json

import pytest

from bench import deliver
from bench.matcher import Workload
from bench.matcher_bound import CountingMatcher
from sluice.bus.topics import MATCHES, SCHEDULES
from sluice.clock import SystemClock
from sluice.eventlog.batched import expand_all
from sluice.eventlog.codec import EventTypes
from sluice.domain.matching import EVENTS
from sluice.eventlog.sqlite import SqliteEventLog
from sluice_services.matcher.service import MatcherService
from tests.unit.test_bench_smoke import figures

pytestmark = pytest.mark.bench  # runs a benchmark: `make test` keeps it, `make test-fast` leaves it out


def test_records_the_fires_the_matcher_makes(tmp_path):
    workload = Workload(schedules=60, datasets=8, seed=7)
    polls = [poll for chunk in workload.match_polls(300, chunk=50) for poll in chunk]

    bound_log = SqliteEventLog(tmp_path / "bound.db")
    bound = CountingMatcher(workload, bound_log)
    for poll in polls:
        bound.apply(poll)
    recorded = [json.loads(event.data) for event in bound_log.read_all(0, 10_000)]
    bound_fires = sorted(tuple(fire) for event in recorded for fire in event["fired"])

    log = SqliteEventLog(tmp_path / "matcher.db")
    matcher = MatcherService(log, SystemClock())
    handlers = matcher.handlers()

    async def feed() -> None:
        for poll in workload.schedule_polls():
            await deliver(handlers[SCHEDULES], poll)
        for poll in polls:
            await deliver(handlers[MATCHES], poll)

    asyncio.run(feed())
    types = EventTypes(EVENTS)
    matcher_fires = sorted((event.job.schedule_id, event.job.sequence) for event in map(
        types.decode, (r for r in expand_all(log.read_all(0, 100_000)) if r.type == "JobTriggered")))

    assert bound.fires == len(bound_fires) > 50
    assert bound_fires == matcher_fires


def test_prints_its_figures(capsys):
    lines = figures(capsys, ["matcher-bound", "--runs", "1", "--schedules", "50", "--datasets", "10",
                             "--notifications", "200"])
    assert {line["metric"] for line in lines} == {
        "notifications_per_s", "decide_us_per_request", "parse_us_per_notification", "append_us_per_notification"}
