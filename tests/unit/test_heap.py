"""Freezing the long-lived heap: cyclic garbage made before a refreeze is still reclaimed by it,
what survives is frozen, and the service runtime freezes what it recovered."""
from __future__ import annotations

import asyncio
import gc
import weakref

import pytest

from sluice.bus.inprocess import InProcessBus
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.runtime.heap import freeze_long_lived
from sluice.runtime.service import ServiceSpec, run_services


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture(autouse=True)
def unfrozen():
    yield
    gc.unfreeze()


def cycle() -> weakref.ref:
    first, second = Node(), Node()
    first.other, second.other = second, first
    return weakref.ref(first)


def test_survivors_are_frozen_and_cyclic_garbage_is_collected_first():
    kept = [Node() for _ in range(100)]
    gone = cycle()
    freeze_long_lived()
    assert gone() is None
    assert gc.get_freeze_count() >= len(kept)


def test_a_refreeze_reclaims_cycles_that_became_garbage_while_frozen():
    first = Node()
    first.other = Node()
    first.other.other = first
    freeze_long_lived()
    ref = weakref.ref(first)
    del first
    gc.collect()
    assert ref() is not None  # frozen: the collector skips it
    freeze_long_lived()
    assert ref() is None


async def test_the_runtime_freezes_what_the_services_recovered(tmp_path):
    recovered: list[Node] = []
    ready = asyncio.Event()
    stop = asyncio.Event()
    log = SqliteEventLog(tmp_path / "events.db")
    bus = InProcessBus()
    spec = ServiceSpec("holder", recover=lambda: recovered.extend(Node() for _ in range(1000)))
    task = asyncio.create_task(run_services([spec], bus, log, stop=stop, on_ready=lambda port: ready.set()))
    await asyncio.wait_for(ready.wait(), 10)
    assert gc.get_freeze_count() >= len(recovered)
    stop.set()
    await task
    await bus.close()
    log.close()
