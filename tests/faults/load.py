"""The campaign's steady load: one schedule launching the ledger program once per partition of the
`events` dataset, and a thread publishing one partition every `interval` seconds through the registry
(at least once: a publish cut by a fault is retried under the same notification id until accepted)."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import grpc
from google.protobuf.duration_pb2 import Duration

from sluice.client import SluiceClient
from sluice.domain.common import PartitionRef
from sluice.v1 import notifications_pb2 as npb, schedules_pb2 as spb
from tests.faults.stack import APP, DATASET, NAMESPACE, PROGRAM

PROGRAM_SECONDS = "0.3"
SCHEDULE = "every_event"


def deploy(registry: SluiceClient, ledger: Path) -> str:
    """The schedule (a run per partition; a LOST attempt retried after 1 s, up to 20 times); its id."""
    schedule = spb.Schedule(
        name=SCHEDULE, enabled=True, program=npb.ProgramRef(namespace=NAMESPACE, app=APP, program=PROGRAM),
        properties={"ledger": str(ledger), "seconds": PROGRAM_SECONDS},
        trigger=spb.Trigger(partition=spb.PartitionTrigger(namespace=NAMESPACE, dataset=DATASET, count=1)),
        retry_policy=spb.RetryPolicy(max_retries=20, delay=Duration(seconds=1), backoff=1))
    return registry.create_schedule(schedule).id


def partition_id(n: int) -> str:
    return f"{DATASET}/e{n}"


class Publisher(threading.Thread):
    """Publishes partitions e0, e1, ... until stopped; `accepted` maps each partition id to the wall-clock
    time its publish was accepted. Stopping finishes the publish in progress first."""

    def __init__(self, registry_address: str, interval: float) -> None:
        super().__init__(name="fault-load", daemon=True)
        self.registry_address = registry_address
        self.interval = interval
        self.accepted: dict[str, float] = {}
        self.refusals = 0
        self._stopping = threading.Event()
        self._lock = threading.Lock()

    def run(self) -> None:
        with SluiceClient(self.registry_address, timeout=5) as registry:
            n = 0
            while not self._stopping.is_set():
                self._publish(registry, n)
                n += 1
                self._stopping.wait(self.interval)

    def _publish(self, registry: SluiceClient, n: int) -> None:
        deadline = time.monotonic() + 600
        while True:
            try:
                registry.publish_partitions(NAMESPACE, DATASET, [PartitionRef({"n": f"e{n}"}, f"/data/e{n}", 1, 1)],
                                            f"events-{n}")
                with self._lock:
                    self.accepted[partition_id(n)] = time.time()
                return
            except grpc.RpcError as error:
                self.refusals += 1
                if time.monotonic() > deadline:
                    raise RuntimeError(f"publishing e{n} failed for 600 s: {error}") from error
                time.sleep(0.25)

    def accepted_since(self, moment: float) -> set[str]:
        with self._lock:
            return {partition for partition, at in self.accepted.items() if at >= moment}

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            return dict(self.accepted)

    def stop(self) -> None:
        self._stopping.set()
        self.join()
