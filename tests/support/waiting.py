"""Waiting in tests for what other tasks, threads or processes do: poll until a condition holds and
return its value, or fail naming what was awaited. `eventually` polls with time.sleep (a test driving
other processes); `until`, its async twin, with asyncio.sleep, so that the loop's other tasks run
meanwhile. Not for schedules: those tests move a simulated clock instead of waiting."""
from __future__ import annotations

import asyncio
import time
from typing import Callable, TypeVar

T = TypeVar("T")


def eventually(probe: Callable[[], T | None], timeout: float = 60.0, what: str = "the condition",
               interval: float = 0.5) -> T:
    """The probe's first truthy value, polled every `interval` s; AssertionError after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


async def until(probe: Callable[[], T | None], what: str = "the condition", timeout: float = 20.0,
                interval: float = 0.02) -> T:
    """The probe's first truthy value, polled every `interval` s on the event loop; AssertionError after
    `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(interval)
