"""Freezing the long-lived heap: cyclic garbage made before a refreeze is still reclaimed by it,
what survives is frozen, survivors of the young generations are frozen between refreezes, and the
service runtime freezes what it recovered and what its services keep. Young collections are spaced
out from the runtime's start."""
from __future__ import annotations

import asyncio
import gc
import weakref

import pytest

from sluice.bus.inprocess import InProcessBus
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.runtime.heap import YOUNG_THRESHOLD, freeze_long_lived, freeze_survivors, keep_frozen, space_young_collections
from sluice.runtime.service import ServiceSpec, run_services


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture(autouse=True)
def unfrozen():
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


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


def test_young_collections_are_spaced_out_and_the_older_generations_thresholds_kept():
    gc.set_threshold(700, 12, 13)
    space_young_collections()
    assert gc.get_threshold() == (YOUNG_THRESHOLD, 12, 13)
    gc.set_threshold(YOUNG_THRESHOLD * 5, 12, 13)
    space_young_collections()
    assert gc.get_threshold() == (YOUNG_THRESHOLD * 5, 12, 13)  # a process's own larger threshold stays


def test_a_polls_objects_in_flight_are_freed_before_a_young_collection_walks_them():
    collections: list[int] = []

    def count(phase: str, info: dict) -> None:
        if phase == "start" and info["generation"] == 0:
            collections.append(1)

    gc.set_threshold(700, 10, 10)
    space_young_collections()
    gc.collect()
    gc.callbacks.append(count)
    try:
        for _ in range(20):  # polls whose parsed records (two containers each) are all in flight at once
            in_flight = [{"record": [index]} for index in range(YOUNG_THRESHOLD // 4)]
            del in_flight
    finally:
        gc.callbacks.remove(count)
    assert collections == []


async def test_the_runtime_freezes_what_the_services_recovered(tmp_path):
    gc.set_threshold(700, 10, 10)
    recovered: list[Node] = []
    ready = asyncio.Event()
    stop = asyncio.Event()
    log = SqliteEventLog(tmp_path / "events.db")
    bus = InProcessBus()
    spec = ServiceSpec("holder", recover=lambda: recovered.extend(Node() for _ in range(1000)))
    task = asyncio.create_task(run_services([spec], bus, log, stop=stop, on_ready=lambda port: ready.set()))
    await asyncio.wait_for(ready.wait(), 10)
    assert gc.get_freeze_count() >= len(recovered)
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD
    stop.set()
    await task
    await bus.close()
    log.close()


def test_survivors_of_the_young_generations_are_frozen_after_their_cyclic_garbage_is_collected():
    freeze_long_lived()
    frozen = gc.get_freeze_count()
    kept = [Node() for _ in range(100)]
    gone = cycle()
    freeze_survivors()
    assert gone() is None
    assert gc.get_freeze_count() >= frozen + len(kept)


async def test_between_refreezes_survivors_are_frozen_every_interval_and_everything_at_the_refreeze():
    freeze_long_lived()
    frozen = gc.get_freeze_count()
    task = asyncio.create_task(keep_frozen(refreeze_seconds=0.2, survivors_seconds=0.02))
    try:
        kept = [Node() for _ in range(100)]
        await asyncio.sleep(0.1)
        assert gc.get_freeze_count() >= frozen + len(kept)  # before the first refreeze
        first = Node()
        first.other = Node()
        first.other.other = first
        ref = weakref.ref(first)
        await asyncio.sleep(0.05)  # frozen as a survivor,
        del first
        await asyncio.sleep(0.3)  # reclaimed by the refreeze
        assert ref() is None
    finally:
        task.cancel()
