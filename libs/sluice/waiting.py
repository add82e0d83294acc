"""Waiting for an asyncio.Event with a timeout, without losing a cancellation."""
from __future__ import annotations

import asyncio


async def wait_set(event: asyncio.Event, timeout: float) -> bool:
    """Until `event` is set or `timeout` seconds passed; whether it was set.

    Not `asyncio.wait_for(event.wait(), timeout)`: in Python 3.11 a cancellation that arrives in
    the turn the event is set is swallowed there (the wait returns, and the cancelled task carries
    on: a stopped subscriber went on following the log). `asyncio.wait` raises it. Nor
    `asyncio.timeout`: it cancels the waiting task itself at every timeout, which raised embedded
    mode's CPU per notification markedly (the in-process bus's polls time out constantly)."""
    if event.is_set():
        return True
    waiting = asyncio.ensure_future(event.wait())
    try:
        done, _ = await asyncio.wait((waiting,), timeout=timeout)
    finally:
        if not waiting.done():
            waiting.cancel()
    return bool(done)
