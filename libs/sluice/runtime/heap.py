"""The cyclic garbage collector and a large, long-lived heap.

A service holds every schedule's state (and views of every job) for its whole life. CPython's
full collections walk all of it: with many schedules a gen-2 collection paused the event loop
long, and often under load (figures: docs/decisions.md). What has survived start-up is long-lived,
so after recovery it is collected once and frozen (`gc.freeze`: later collections skip it), and
again every `REFREEZE_SECONDS`: a frozen object that becomes cyclic garbage is only reclaimed by
the next refreeze, which unfreezes, collects everything, and freezes what survives. Acyclic
garbage (all domain state: frozen dataclasses) is freed by reference counting at once anyway.

Between refreezes the heap grows (the jobs view's jobs, each schedule's latest state), and what grew
was walked by every full collection, and the pauses grew long again. So every
`SURVIVORS_SECONDS` the young generations are collected and what survived them is frozen too, a
short pause. In steady state the collector found no cyclic garbage at all, so freezing survivors
early holds back next to nothing.

The young generation is collected every `YOUNG_THRESHOLD` allocations, not CPython's 700: a poll's
handling makes thousands of short-lived objects (protobuf messages, JSON dicts, events), and with
the default a young collection ran every few records, walking the poll's objects still in use and
then walking them again in the middle generation. Most of them are freed by reference counting
before a collection at the larger threshold, and are never walked."""
from __future__ import annotations

import asyncio
import gc
import logging
import time
from contextlib import contextmanager
from typing import Iterator

log = logging.getLogger(__name__)

REFREEZE_SECONDS = 600.0
SURVIVORS_SECONDS = 1.0
YOUNG_THRESHOLD = 10_000


def space_young_collections() -> None:
    """Young collections every YOUNG_THRESHOLD allocations at least (a larger threshold set by the
    process is kept); the older generations' thresholds stay."""
    young, middle, old = gc.get_threshold()
    gc.set_threshold(max(young, YOUNG_THRESHOLD), middle, old)


def freeze_long_lived() -> None:
    """One full collection, then what survived is exempt from collections until the next call."""
    started = time.perf_counter()
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    log.debug("froze %d long-lived objects in %.1f ms", gc.get_freeze_count(), (time.perf_counter() - started) * 1000)


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection meanwhile: for work that builds much and frees little (packing or
    unpacking a snapshot, indexing a recovered state, a burst of decisions), over which the collector
    ran full collections of the whole heap again and again. Reference counting still frees what it
    drops; the collector runs again after."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@contextmanager
def built_then_frozen() -> Iterator[None]:
    """For a burst that builds state which survives and is not garbage (a recovery's fold, a burst of
    fires or fired jobs): the collector waits meanwhile (`collector_paused`), and what was built is
    frozen at the end (`freeze_built`), before the collector runs again (its first collection would
    walk it all)."""
    with collector_paused():
        try:
            yield
        finally:
            freeze_built()


def freeze_built() -> None:
    """Freeze what is not frozen yet, without collecting first: after a burst whose survivors are not
    garbage, a collection would only walk them once more. A cycle frozen by mistake waits for the next
    `freeze_long_lived`."""
    gc.freeze()


def freeze_survivors() -> None:
    """Collect the young generations, then freeze what is not frozen yet."""
    gc.collect(1)
    gc.freeze()


async def keep_frozen(refreeze_seconds: float, survivors_seconds: float = SURVIVORS_SECONDS) -> None:
    """`freeze_survivors` every `survivors_seconds` and `freeze_long_lived` every `refreeze_seconds`."""
    next_refreeze = time.monotonic() + refreeze_seconds
    while True:
        await asyncio.sleep(min(survivors_seconds, max(next_refreeze - time.monotonic(), 0.0)))
        if time.monotonic() >= next_refreeze:
            freeze_long_lived()
            next_refreeze = time.monotonic() + refreeze_seconds
        else:
            freeze_survivors()
