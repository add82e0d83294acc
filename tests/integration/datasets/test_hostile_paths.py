"""Issue 23, hole 1: a partition key value, a program's manifest path or its staged location must not
make the launcher move or delete files outside the output dataset.

The chain is the real one: a producer adds a clickstream-like partition, a program copies the input's
key into its output key (as the shipped hourly program does), the launcher publishes through the
commit sequence (LocalFiles). Sentinel files elsewhere under the data dir must survive every attack."""
from __future__ import annotations

import hashlib
import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import pytest

from sluice.clock import SimulatedClock
from sluice.datasets import PartitionQuery
from sluice.domain.common import ProgramRef, RunStatus
from sluice.domain.datasets import DatasetSpec, KeySpec, Partition
from sluice.domain.names import decode_segment
from sluice.eventlog.sqlite import SqliteEventLog
from sluice_services.datasets.service import DatasetsService
from tests.support.partitions_api import PartitionsApiServer
from tests.integration.datasets.test_launcher_runs import launch_job

pytestmark = pytest.mark.integration

NS = "experiments"
PROGRAM = ProgramRef(NS, "clickstream", "hourly_metrics")
CLIMBING = "x/../../.."
"""From <data>/experiments/hourly/marketplace=<it> the joined path climbs back to <data> itself."""


def copying_program(attack: str, world: World) -> Callable[[Path], int]:
    """Reads the input partitions and writes one output per partition with the same key; `attack`
    says what the program's result.json lies about."""
    victim = world.root / "data" / "keep.txt"

    def run(context_path: Path) -> int:
        system = json.loads(context_path.read_text())["system"]
        outputs = []
        for index, found in enumerate(world.plane.datasets.query(NS, "clickstream", PartitionQuery())):
            partition = found.partition
            staged = Path(system["staging_dir"]) / f"out-{index}"
            staged.mkdir(parents=True)
            data = b'{"clicks": 1}\n'
            (staged / "part-0.json").write_bytes(data)
            files = [{"path": "part-0.json", "size_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}]
            location = str(staged)
            stolen = {"size_bytes": victim.stat().st_size, "sha256": hashlib.sha256(victim.read_bytes()).hexdigest()}
            if attack == "manifest_climbs":
                files.append({"path": os.path.relpath(victim, staged), **stolen})
            elif attack == "manifest_absolute":
                files.append({"path": str(victim), **stolen})
            elif attack == "staged_elsewhere":
                location, files = str(victim.parent), [{"path": victim.name, **stolen}]
            outputs.append({"namespace": NS, "dataset": "hourly", "key": dict(partition.key),
                            "staged_location": location, "format": "json", "size_bytes": len(data),
                            "record_count": 1, "files": files})
        Path(system["result_path"]).write_text(json.dumps({"outputs": outputs, "inputs": [], "metrics": {}}))
        return 0
    return run


class World:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.clock = SimulatedClock(datetime(2026, 11, 22, 10, tzinfo=timezone.utc))
        self.log = SqliteEventLog(root / "events.db", clock=self.clock)
        self.plane = DatasetsService(self.log, self.clock)
        self.api = PartitionsApiServer(self.plane, root / "data")
        data = root / "data" / NS
        for name in ("clickstream", "hourly"):
            self.plane.datasets.create(DatasetSpec(NS, name, (KeySpec("marketplace"),), str(data / name)))
        self.sentinels = {root / "data" / "keep.txt": "the data dir's own file\n",
                          data / "other" / "marketplace=US" / "part-0.json": "another dataset's partition\n"}
        for path, text in self.sentinels.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)

    def add_input(self, marketplace: str) -> None:
        location = self.root / "incoming" / "part"
        location.mkdir(parents=True)
        (location / "part-0.json").write_text("{}\n")
        self.plane.datasets.add(NS, "clickstream", [Partition({"marketplace": marketplace}, str(location))])

    async def run(self, program: Callable[[Path], int]):
        return (await launch_job(self.log, self.clock, program, self.root / "data", self.api.run_data(), PROGRAM))[1]

    def assert_sentinels_survive(self) -> None:
        for path, text in self.sentinels.items():
            assert path.is_file() and path.read_text() == text, f"{path} was moved or deleted"
        assert not (self.root / "data" / "part-0.json").exists(), "an output landed outside its dataset"


@pytest.fixture
def world(tmp_path: Path):
    w = World(tmp_path)
    with w.api:
        yield w
    w.log.close()


@pytest.mark.parametrize("attack", ["climbing_key", "manifest_climbs", "manifest_absolute", "staged_elsewhere"])
async def test_hostile_keys_and_result_paths_never_touch_files_outside_the_output_dataset(world: World, attack):
    world.add_input(CLIMBING if attack == "climbing_key" else "US")
    run = await world.run(copying_program(attack, world))
    world.assert_sentinels_survive()
    published = world.plane.datasets.query(NS, "hourly", PartitionQuery())
    if attack == "climbing_key":  # any text is a valid key value: it lands, encoded, inside the dataset
        assert run.status is RunStatus.COMPLETED, run.error
        [partition] = [p.partition for p in published]
        location = Path(partition.location)
        assert location.parent == world.root / "data" / NS / "hourly"
        assert decode_segment(location.name.split("=", 1)[1]) == CLIMBING == partition.key["marketplace"]
        assert (location / "part-0.json").is_file()
    else:  # the result file lies about where files are: the publish is refused, nothing moves
        assert run.status is RunStatus.FAILED
        assert "publishing outputs failed" in run.error
        assert published == []
        assert not (world.root / "data" / NS / "hourly").exists()
