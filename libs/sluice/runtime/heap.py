"""The cyclic garbage collector and a large, long-lived heap.

A service holds every schedule's state (and views of every job) for its whole life. CPython's
full collections walk all of it: with 10,000 schedules a gen-2 collection paused the event loop
for ~100 ms, twice in 2.6 s at 1,000 notifications/s. What has survived start-up is long-lived,
so after recovery it is collected once and frozen (`gc.freeze`: later collections skip it), and
again every `REFREEZE_SECONDS`: a frozen object that becomes cyclic garbage is only reclaimed by
the next refreeze, which unfreezes, collects everything, and freezes what survives. Acyclic
garbage (all domain state: frozen dataclasses) is freed by reference counting at once anyway."""
from __future__ import annotations

import asyncio
import gc
import logging
import time

log = logging.getLogger(__name__)

REFREEZE_SECONDS = 600.0


def freeze_long_lived() -> None:
    """One full collection, then what survived is exempt from collections until the next call."""
    started = time.perf_counter()
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    log.debug("froze %d long-lived objects in %.1f ms", gc.get_freeze_count(), (time.perf_counter() - started) * 1000)


async def refreeze_every(seconds: float) -> None:
    while True:
        await asyncio.sleep(seconds)
        freeze_long_lived()
