"""Waiting for an asyncio.Event with a timeout, without losing a cancellation."""
from __future__ import annotations

import asyncio


async def wait_set(event: asyncio.Event, timeout: float) -> bool:
    """Until `event` is set or `timeout` seconds passed; whether it was set.

    Not `asyncio.wait_for(event.wait(), timeout)`: in Python 3.11 that runs the wait as a task of
    its own, and a cancellation that arrives while the event is being set is swallowed (the wait
    returns, and the cancelled task carries on: a stopped subscriber went on following the log)."""
    if event.is_set():
        return True
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return False
    return True
