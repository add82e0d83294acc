"""A service's timer loop on the injected clock: run what is due, sleep until the next wake-up."""
from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Callable

from sluice.clock import Clock
from sluice.runtime.metrics_scheduler import observe_timer_lag
from sluice.waiting import wait_set

MAX_TIMER_SLEEP = 1.0
"""Seconds the loop sleeps at most, so a clock that jumps (or a simulated one) is noticed."""


async def run_timer_loop(clock: Clock, fire_due: Callable[[], object], next_wake_at: Callable[[], datetime | None],
                         changed: asyncio.Event) -> None:
    """`changed` is set by the service when its next wake-up may have moved earlier."""
    while True:
        due, now = next_wake_at(), clock.now()
        fire_due()
        if due is not None and due <= now:
            observe_timer_lag(due, now)
        changed.clear()
        next_at = next_wake_at()
        delay = MAX_TIMER_SLEEP if next_at is None else (next_at - clock.now()).total_seconds()
        await wait_set(changed, max(0.0, min(delay, MAX_TIMER_SLEEP)))
