"""The launcher's RunData port in the crash cluster: each call answered by the datasets node standing
at the time (tests/support/run_data.LocalRunData over its service). When the datasets service crashes
inside a call, the call waits until the cluster has booted a new datasets node and asks that one
again, as the gRPC adapter waits out an UNAVAILABLE datasets service (every RunData call is
idempotent, so a call repeated after the crash does nothing twice)."""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Awaitable, Callable, TypeVar

from sluice.domain.datasets.run_access import AccessGrant
from sluice.domain.runs import OutputPartition
from tests.support.faults import Crash
from tests.support.run_data import LocalRunData, UNSERVED_ADDRESS

T = TypeVar("T")


class CrashingRunData:
    def __init__(self, datasets_node: Callable[[], Any], partitions_dir: Path) -> None:
        """`datasets_node`: the cluster's current datasets node (None while it is being booted)."""
        self._datasets_node = datasets_node
        self._partitions_dir = partitions_dir

    def address(self) -> str:
        return UNSERVED_ADDRESS

    async def open_run(self, run_id: str, grants: tuple[AccessGrant, ...], attempt: int = 0) -> str:
        return await self._call(lambda run_data: run_data.open_run(run_id, grants, attempt))

    async def publish(self, run_id: str, result: dict[str, Any], attempt: int = 0) -> tuple[OutputPartition, ...]:
        return await self._call(lambda run_data: run_data.publish(run_id, result, attempt))

    async def release(self, run_id: str, consumed: Any, reason: str,
                      attempt: int = 0) -> tuple[OutputPartition, ...] | None:
        return await self._call(lambda run_data: run_data.release(run_id, consumed, reason, attempt))

    async def _call(self, call: Callable[[LocalRunData], Awaitable[T]]) -> T:
        while True:
            node = await self._standing()
            try:
                return await call(LocalRunData(node.service, self._partitions_dir))
            except Crash as crash:
                if not crash.point.boundary.startswith("datasets."):
                    raise
            while self._datasets_node() is node:  # the cluster restarts it after the step that crashed it
                await asyncio.sleep(0)

    async def _standing(self) -> Any:
        while (node := self._datasets_node()) is None:
            await asyncio.sleep(0)
        return node
