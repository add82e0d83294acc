"""The launcher's port to the datasets service: what it asks for the runs it launches. The adapter is
run_data_grpc.GrpcRunData (the datasets service's RunData API, the only way the launcher reaches the
data plane); tests/integration/datasets/test_run_data_contract.py holds every adapter to the same behaviour.

    token = await run_data.open_run(run.id, run_grants(run), attempt)  # before the program starts
    outputs = await run_data.publish(run.id, result, attempt)          # exit code 0; PublishError when refused
    published = await run_data.release(run.id, consumed, reason, attempt)  # failed or lost: what it took goes back

Every call names the run's attempt: the datasets service refuses (FailedPrecondition, PublishError) an
attempt that ended or that a later attempt superseded, which fences a launcher that lost its lease.
"""
from __future__ import annotations

from typing import Any, Protocol

from sluice.domain.common import PartitionCommitted
from sluice.domain.datasets.run_access import EVERY_DATASET, AccessGrant
from sluice.domain.runs import OutputPartition, Run


class RunData(Protocol):
    def address(self) -> str:
        """Where a program reaches the datasets service's Partitions API (host:port)."""
        ...

    async def open_run(self, run_id: str, grants: tuple[AccessGrant, ...], attempt: int = 0) -> str:
        """Open the run's access with these grants for the attempt; the program's bearer token."""
        ...

    async def publish(self, run_id: str, result: dict[str, Any], attempt: int = 0) -> tuple[OutputPartition, ...]:
        """Publish the attempt's outputs and consumed partitions exactly once (its access ends); the
        outputs as published. PublishError (sluice.datasets.files) when the datasets service refuses
        them (or the attempt ended, or another superseded it); the same call again after a crash
        publishes nothing twice."""
        ...

    async def release(self, run_id: str, consumed: Any, reason: str,
                      attempt: int = 0) -> tuple[OutputPartition, ...] | None:
        """The attempt failed: the partitions it took (its consumed.json) are failed on their consumers
        and its access ends; None. Unless the attempt published its outputs already: then those outputs
        (the run completed; the launcher records it so)."""
        ...


def run_grants(run: Run) -> tuple[AccessGrant, ...]:
    """What a run's program may read and consume: every dataset of its program's namespace, and in other
    namespaces only the datasets its triggering notifications name."""
    home = run.job.program.namespace
    named: dict[str, set[str]] = {home: {EVERY_DATASET}}
    for notification in run.job.context.notifications:
        payload = notification.payload
        if isinstance(payload, PartitionCommitted) and payload.namespace != home:
            named.setdefault(payload.namespace, set()).add(payload.dataset)
    return tuple(AccessGrant(namespace, tuple(sorted(datasets))) for namespace, datasets in named.items())
