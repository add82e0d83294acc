"""The SDK's partition source over the real Partitions gRPC API (sluice.sdk.api), as a launched
program uses it: knows, partitions, take (with a config), the consumed.json sidecar, and errors
that name the call and the server's reason."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from sluice.clock import SystemClock
from sluice.domain.consumer.state import ConsumerConfig, ConsumerRef
from sluice.domain.datasets import DatasetSpec, KeySpec, KeyType, Partition
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.sdk.context import parse_context
from sluice.sdk.partitions import Between, ConsumeError, PartitionSource
from sluice_services.datasets.service import DatasetsService
from tests.support.partitions_api import PartitionsApiServer

pytestmark = pytest.mark.integration

RUN_ID = "run-7"


@pytest.fixture
def world(tmp_path: Path):
    log = SqliteEventLog(tmp_path / "events.db")
    plane = DatasetsService(log, SystemClock())
    plane.datasets.create(DatasetSpec("web", "clicks", (KeySpec("hour", KeyType.INT),), str(tmp_path / "clicks")))
    for hour in (1, 5, 9, 5):
        plane.datasets.add("web", "clicks", [Partition({"hour": str(hour)}, f"/data/clicks/{hour}", hour)])
    with PartitionsApiServer(plane) as api:
        context = parse_context({
            "run_id": RUN_ID, "job_id": "job-7", "program": {"namespace": "web", "app": "analytics", "program": "count"},
            "notifications": [], "system": {"data_dir": str(tmp_path), "staging_dir": str(tmp_path / "staging"),
                                            "result_path": str(tmp_path / "run" / "result.json"),
                                            **api.context_for(RUN_ID)}})
        source = PartitionSource(context)
        yield plane, source, tmp_path
        source.close()
    log.close()


def test_knows_and_queries_registered_datasets_through_the_api(world):
    _, source, _ = world
    assert source.knows("clicks") and not source.knows("nothing_here")
    found = source.partitions("clicks", where={"hour": Between(2, 10)})
    assert [(p.key["hour"], p.location) for p in found] == [("9", "/data/clicks/9"), ("5", "/data/clicks/5")]
    assert [p.key["hour"] for p in source.partitions("clicks", limit=2)] == ["1", "5"]


def test_takes_new_partitions_once_and_writes_the_sidecar(world):
    plane, source, root = world
    taken = source.take("clicks", limit=2, config=ConsumerConfig(max_retries=1, timeout_seconds=60))
    assert [p.key["hour"] for p in taken] == ["1", "5"] and all(p.consumer == "analytics_count" for p in taken)
    rest = source.take("clicks", limit=10)
    assert [p.key["hour"] for p in rest] == ["9", "5"]
    assert source.take("clicks") == []
    sidecar = json.loads((root / "run" / "consumed.json").read_text())
    assert sidecar == source.consumed_document() == [
        {"namespace": "web", "dataset": "clicks", "consumer": "analytics_count", "ids": [p.id for p in taken + rest]}]
    state = plane.consumers.state(ConsumerRef("web", "clicks", "analytics_count"))
    assert state.config.max_retries == 1 and state.config.timeout_seconds == 60
    assert {item.taken_by for item in state.working_set} == {RUN_ID}


def test_a_refused_call_is_a_consume_error_naming_the_call_and_the_reason(world):
    _, source, _ = world
    with pytest.raises(ConsumeError, match=r"^Consume web\.nothing_here: NOT_FOUND: "):
        source.take("nothing_here")
    with pytest.raises(ConsumeError, match="INVALID_ARGUMENT"):
        source.take("clicks", where={"minute": "3"})
