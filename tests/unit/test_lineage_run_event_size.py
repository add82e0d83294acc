"""A run's lineage event names the datasets it read and wrote, each with the partitions (its subset facet). A run
of thousands of partitions made an event over the bus limit, which the outbox dead-letters: the run's lineage was
lost. It keeps the datasets then, without their partitions."""
from __future__ import annotations

import json
from datetime import datetime, timezone

from openlineage.client.event_v2 import RunState

from sluice.domain.bounds import MAX_BUS_MESSAGE_BYTES
from sluice.domain.common import PartitionRef, ProgramRef, RunStatus
from sluice.domain.jobs import Job, TriggerContext
from sluice.domain.runs import InputPartition, OutputPartition, Run
from sluice_services.launcher import lineage_events

T0 = datetime(2026, 11, 28, tzinfo=timezone.utc)


def _run(partitions: int) -> Run:
    job = Job("00000000-0000-4000-8000-000000000001", "s", 1, ProgramRef("web", "clicks", "compact"),
              TriggerContext("s", "compact_on_arrival"), T0)
    read = tuple(InputPartition("web", "clicks", PartitionRef({"day": "2026-11-28", "part": f"{n:05d}"}, f"/in/{n}"))
                 for n in range(partitions))
    written = (OutputPartition("web", "compacted", PartitionRef({"day": "2026-11-28"}, "/out/2026-11-28")),)
    return Run("10000000-0000-4000-8000-000000000001", job, RunStatus.COMPLETED, T0, inputs=read, outputs=written)


def _program_event(run: Run) -> tuple[bytes, dict]:
    raw = lineage_events.run_ended(run, RunState.COMPLETE, T0)[0]
    return raw, json.loads(raw)


def test_a_run_of_a_few_partitions_names_them():
    _, event = _program_event(_run(3))
    subset = event["inputs"][0]["inputFacets"]["subset"]["inputCondition"]["partitions"]
    assert [p["dimensions"]["part"] for p in subset] == ["00000", "00001", "00002"]


def test_a_run_of_thousands_of_partitions_keeps_its_datasets_under_the_bus_limit():
    raw, event = _program_event(_run(20_000))
    assert len(raw) <= MAX_BUS_MESSAGE_BYTES
    assert [(d["namespace"], d["name"]) for d in event["inputs"]] == [("web", "clicks")]
    assert [(d["namespace"], d["name"]) for d in event["outputs"]] == [("web", "compacted")]
    assert not event["inputs"][0].get("inputFacets")
