"""The log's readers that read only some streams (outbox relays, the jobs view, the matcher's
schedule lookup) miss nothing they used to see: each relay's route publishes nothing from the
streams its relay no longer reads, and the filtered folds equal the unfiltered ones."""
from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone

import pytest

from sluice.bus.inprocess import InProcessBus
from sluice.clock import SimulatedClock
from sluice.domain import apps, checking, commits, matching, runs, schedules
from sluice.domain.common import ProgramRef
from sluice.domain.datasets import transactions
from sluice.domain.schedules import Schedule
from sluice.domain.triggers import PartitionTrigger
from sluice.eventlog.port import RecordedEvent, in_streams
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.readmodels.jobs import JobsView
from sluice_services import composition
from sluice_services.matcher.lookup import ScheduleLookup
from tests.support.simulated import SimulatedScheduler

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 22, tzinfo=timezone.utc)
STREAMS = ("schedule-s1", "matcher-s1", "checker-queue", "run-r1", "transaction-t1", "commit-c1", "app-ns.app",
           "dataset-ns.d", "lineage-r1", "consumer-c1")
TYPES = [event.__name__ for domain in (schedules.EVENTS, matching.EVENTS, checking.EVENTS, runs.EVENTS,
                                       transactions.TRANSACTION_EVENTS, transactions.DATASET_EVENTS, commits.EVENTS,
                                       apps.EVENTS) for event in domain]


def _recorded(stream: str, type_: str) -> RecordedEvent:
    return RecordedEvent(id=f"{stream}-{type_}", stream=stream, version=0, position=1, type=type_,
                         data=json.dumps({}).encode(), metadata={}, recorded_at=T0)


def test_every_route_publishes_nothing_from_the_streams_its_relay_does_not_read(tmp_path) -> None:
    log, clock = SqliteEventLog(), SimulatedClock(T0)
    bus = InProcessBus()
    try:
        settings = composition.Settings(data_dir=tmp_path)
        specs = composition.build(composition.SERVICES, log, bus, clock, settings, bus.producer())
        routed = [spec for spec in specs if spec.route is not None]
        assert {spec.name for spec in routed} == {"registry", "matcher", "checker", "datasets", "launcher"}
        for spec in routed:
            assert spec.route_prefixes, spec.name
            for stream in STREAMS:
                if in_streams(stream, spec.route_prefixes):
                    continue
                for type_ in TYPES:
                    assert spec.route(_recorded(stream, type_)) == [], (spec.name, stream, type_)
    finally:
        log.close()


def _on_partitions(name: str) -> Schedule:
    return Schedule("", name, ProgramRef("ns", "app", "wf"), PartitionTrigger("ns", name, 1), {}, enabled=True)


@pytest.fixture
async def history(tmp_path):
    scheduler = SimulatedScheduler(tmp_path, T0)
    for n in range(3):
        await scheduler.create(_on_partitions(f"feed{n}"))
    for hour in range(4):
        await scheduler.partitions("ns", f"feed{hour % 3}", {"hour": f"{hour:02d}"})
        await scheduler.advance(timedelta(minutes=1))
    assert scheduler.launches
    yield scheduler
    scheduler.close()


async def test_the_jobs_view_read_from_its_streams_equals_the_fold_of_the_whole_log(history) -> None:
    recovered = JobsView()
    assert recovered.recover(history.log) > 0
    assert recovered.list() == history.jobs.list() and recovered.list()
    assert recovered.position == history.log.head_position()  # past the events it skipped


async def test_the_jobs_view_following_its_streams_keeps_up_with_the_log(history) -> None:
    view = JobsView()
    following = asyncio.ensure_future(view.follow(history.log))
    try:
        await asyncio.sleep(0.1)
        await history.partitions("ns", "feed0", {"hour": "10"})
        await history.advance(timedelta(minutes=1))
        for _ in range(200):
            if view.list() == history.jobs.list():
                break
            await asyncio.sleep(0.01)
        assert view.list() == history.jobs.list()
    finally:
        following.cancel()


async def test_the_lookup_folds_the_registry_streams_in_the_background_and_syncs_before_a_lookup(history) -> None:
    bus = InProcessBus()
    lookup = ScheduleLookup(history.log, bus.producer())
    lookup.recover()
    indexed = {key: set(ids) for key, ids in lookup._index.items() if ids}
    assert len(set().union(*indexed.values())) == 3

    following = asyncio.ensure_future(lookup.follow())
    try:
        await history.create(_on_partitions("late"))
        for _ in range(200):
            if any("late" in key for key, ids in lookup._index.items() if ids):
                break
            await asyncio.sleep(0.01)
        assert any("late" in key for key, ids in lookup._index.items() if ids)  # folded by follow()
    finally:
        following.cancel()

    await history.create(_on_partitions("later"))
    lookup.sync()  # what a notification's lookup does first: nothing committed before it is missed
    assert any("later" in key for key, ids in lookup._index.items() if ids)
    assert lookup._position == history.log.head_position()
