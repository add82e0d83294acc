"""wait_set: an Event with a timeout, and a cancellation is never lost (asyncio.wait_for in Python 3.11
returns when the event is set in the same turn as the cancellation, and the task carries on)."""
from __future__ import annotations

import asyncio

from sluice.waiting import wait_set


async def test_a_cancellation_arriving_as_the_event_is_set_ends_the_waiting_task():
    event = asyncio.Event()

    async def wait_forever() -> None:
        while True:
            event.clear()
            await wait_set(event, 60.0)

    task = asyncio.ensure_future(wait_forever())
    await asyncio.sleep(0)  # the task waits
    event.set()
    task.cancel()
    done, _ = await asyncio.wait([task], timeout=1.0)
    assert done and task.cancelled()


async def test_whether_the_event_was_set_or_the_time_ran_out():
    event = asyncio.Event()
    assert await wait_set(event, 0.01) is False
    asyncio.get_running_loop().call_soon(event.set)
    assert await wait_set(event, 60.0) is True
    assert await wait_set(event, 0.0) is True  # already set: no wait
