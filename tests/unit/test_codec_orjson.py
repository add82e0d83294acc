"""Events are written by orjson; what it writes must be what `to_jsonable` + json write, which the
decoder and every log written so far assume."""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import pkgutil
import tracemalloc
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Mapping

import orjson

import sluice
from sluice.domain import apps, checking, commits, matching, runs, schedules
from sluice.eventlog.batched import expand_all
from sluice.eventlog import codec
from sluice.domain.common import ProgramRef, RunStatus
from sluice.domain.constraints import ConcurrencyConstraint, TimeWindowConstraint
from sluice.domain.consumer import aggregate as consumer_events
from sluice.domain.datasets import transactions
from sluice.domain.schedules import Schedule
from sluice.domain.triggers import AndTrigger, DataSizeTrigger, PartitionTrigger, ProgramStatusTrigger, TimeTrigger
from sluice.eventlog.port import RecordedEvent
from tests.support.simulated import SimulatedScheduler

ALL_TYPES = codec.EventTypes([*apps.EVENTS, *checking.EVENTS, *commits.EVENTS, *matching.EVENTS, *runs.EVENTS,
                              *schedules.EVENTS, *transactions.DATASET_EVENTS, *transactions.TRANSACTION_EVENTS,
                              *consumer_events.EVENTS])
RECORDED = Path(__file__).parents[1] / "replay" / "recorded.jsonl"
T0 = datetime(2026, 3, 28, 22, tzinfo=timezone.utc)
P = ProgramRef("ns", "app", "wf")


def stdlib_json(event: object) -> object:
    return json.loads(json.dumps(codec.to_jsonable(event)))


def test_no_dataclass_has_a_field_orjson_would_leave_out():
    """orjson skips fields named _x and fields not in __init__; to_jsonable writes every field."""
    skipped = []
    for module_info in pkgutil.walk_packages(sluice.__path__, "sluice."):
        if ".v1" in module_info.name:
            continue
        module = importlib.import_module(module_info.name)
        for name, cls in vars(module).items():
            if inspect.isclass(cls) and dataclasses.is_dataclass(cls) and cls.__module__ == module.__name__:
                skipped += [f"{cls.__qualname__}.{f.name}" for f in dataclasses.fields(cls)
                            if f.name.startswith("_") or not f.init]
    assert skipped == []


def test_the_recorded_log_encodes_as_before():
    events = []
    for line in RECORDED.read_text().splitlines():
        row = json.loads(line)
        recorded = RecordedEvent(row["id"], row["stream"], row["version"], row["position"], row["type"],
                                 json.dumps(row["data"]).encode(), row["metadata"], T0)
        events.append(ALL_TYPES.decode(recorded))
    assert len({type(e) for e in events}) >= 15
    for event in events:
        assert orjson.loads(codec.dumps(event)) == stdlib_json(event), type(event).__name__


async def test_a_scheduler_run_encodes_as_before(tmp_path):
    scheduler = SimulatedScheduler(tmp_path, T0)
    try:
        await scheduler.deploy("ns", "app", ("wf", "next"))
        await scheduler.create(Schedule("", "both", P, AndTrigger((PartitionTrigger("ns", "a", 2, {"region": ("eu",)}),
                                                                   DataSizeTrigger("ns", "b", 1000))),
                                        {"k": "v"}, enabled=True,
                                        constraints=(ConcurrencyConstraint(1, group="g"),)))
        await scheduler.create(Schedule("", "nightly", P, TimeTrigger("30 2 * * *", "Europe/Berlin"), {}, enabled=True,
                                        constraints=(TimeWindowConstraint("01:00", "05:00", "Europe/Berlin"),)))
        await scheduler.create(Schedule("", "after", ProgramRef("ns", "app", "next"),
                                        ProgramStatusTrigger("ns", "app", "wf", (RunStatus.COMPLETED.value,)), {}, enabled=True))
        await scheduler.partitions("ns", "a", {"region": "eu", "hour": "01"}, {"region": "eu", "hour": "02"})
        await scheduler.partitions("ns", "b", {"hour": "01"}, size_bytes=5000)
        await scheduler.advance(timedelta(hours=6))
        for launch in list(scheduler.launches):
            await scheduler.finish(launch)
        await scheduler.advance(timedelta(minutes=5))
        recorded = [r for r in expand_all(scheduler.log.read_all(0, 10_000)) if r.type in ALL_TYPES]
        assert {"JobTriggered", "JobsAdmitted", "NotificationMatched", "ScheduleCreated", "RunObserved"} <= {
            r.type for r in recorded}
        for record in recorded:
            event = ALL_TYPES.decode(record)
            assert orjson.loads(codec.dumps(event)) == stdlib_json(event), record.type
            assert orjson.loads(record.data) == stdlib_json(event), record.type
    finally:
        scheduler.close()


@dataclass(frozen=True)
class ByNumber:
    items: Mapping[int, str]
    at: datetime


def test_what_orjson_refuses_is_written_by_json():
    event = ByNumber({1: "a", 20: "b"}, T0)
    assert json.loads(codec.dumps(event)) == {"items": {"1": "a", "20": "b"}, "at": T0.isoformat()}
    huge = ByNumber({2**70: "beyond 64 bits"}, T0)
    assert json.loads(codec.dumps(huge))["items"] == {str(2**70): "beyond 64 bits"}


def test_an_encoded_event_holds_no_more_memory_than_its_length():
    data = codec.dumps(ByNumber({}, T0))
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        kept = [codec.dumps(ByNumber({}, T0)) for _ in range(100)]
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (held - before) / len(kept) < len(data) + 200
