"""What a server says of itself, apart: alive and ready.

- Alive (GET /healthz): the process and its event loop answer. A task ticks every TICK_SECONDS; a loop
  that has not ticked for `stall_after` seconds is not alive (a handler blocking it, a deadlock), and a
  watchdog thread logs it with the loop thread's stack, also when nobody asks. Restarting helps here.
- Ready (GET /readyz, and every service's gRPC health status): recovered, and every dependency answered
  its last probe (`watch_dependency`: the event log's ping every PROBE_SECONDS, with a timeout).
  NOT_SERVING / 503 while either is false, SERVING / 200 again once both hold, without a restart:
  restarting would not bring the database back, so readiness never feeds liveness.
"""
from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback
from typing import Awaitable, Callable

log = logging.getLogger(__name__)

TICK_SECONDS = 0.5
STALL_SECONDS = 10.0
"""A loop that has not ticked for this long is not alive."""
PROBE_SECONDS = 1.0
PROBE_TIMEOUT = 2.0
"""A probe that has not answered within this is a failure (it goes on; the next waits for it)."""

Listener = Callable[[bool], Awaitable[None]]


class Health:
    """Liveness and readiness of one server process. Change it on its event loop; read it anywhere."""

    def __init__(self, stall_after: float = STALL_SECONDS) -> None:
        self._stall_after = stall_after
        self._recovered = False
        self._down: dict[str, str] = {}
        self._tick = time.monotonic()
        self._listeners: list[Listener] = []
        self._loop_thread: int | None = None

    # -- readiness -------------------------------------------------------------------------------

    def ready(self) -> bool:
        return self._recovered and not self._down

    def why_not_ready(self) -> str:
        if not self._recovered:
            return "recovering"
        return "; ".join(f"{name} unreachable: {why}" for name, why in sorted(self._down.items()))

    def listen(self, listener: Listener) -> None:
        """`listener(ready)` is awaited after every change of readiness (gRPC health statuses)."""
        self._listeners.append(listener)

    async def recovered(self) -> None:
        await self._changing(lambda: setattr(self, "_recovered", True))

    async def dependency(self, name: str, failure: str | None) -> None:
        """`failure`: why `name` did not answer its probe; None: it did."""
        if self._down.get(name) == failure:
            return
        if failure is None:
            log.warning("%s reachable again", name)
            await self._changing(lambda: self._down.pop(name, None))
        else:
            if name not in self._down:
                log.warning("%s unreachable, not ready until it answers: %s", name, failure)
            await self._changing(lambda: self._down.__setitem__(name, failure))

    async def _changing(self, change: Callable[[], object]) -> None:
        before = self.ready()
        change()
        if self.ready() != before:
            for listener in self._listeners:
                await listener(self.ready())

    # -- liveness --------------------------------------------------------------------------------

    def alive(self) -> bool:
        return self.stalled_for() < self._stall_after

    def stalled_for(self) -> float:
        """Seconds since the event loop last ticked (0 while `beat` is not running yet)."""
        return 0.0 if self._loop_thread is None else max(0.0, time.monotonic() - self._tick)

    async def beat(self, every: float = TICK_SECONDS) -> None:
        """Tick on the event loop, forever, and watch the ticks from a thread (which logs a stall)."""
        self._loop_thread = threading.get_ident()
        stop = threading.Event()
        watchdog = threading.Thread(target=self._watch, args=(stop,), name="sluice-watchdog", daemon=True)
        self._tick = time.monotonic()
        watchdog.start()
        try:
            while True:
                self._tick = time.monotonic()
                await asyncio.sleep(every)
        finally:
            stop.set()

    def _watch(self, stop: threading.Event) -> None:
        reported = False
        while not stop.wait(1.0):
            stalled = self.stalled_for()
            if stalled >= self._stall_after and not reported:
                frame = sys._current_frames().get(self._loop_thread or 0)
                stack = "".join(traceback.format_stack(frame)) if frame is not None else "(no stack)"
                log.error("event loop stalled for %.1f s, not alive; it is at:\n%s", stalled, stack)
                reported = True
            elif stalled < self._stall_after and reported:
                log.warning("event loop ticks again")
                reported = False


async def watch_dependency(health: Health, name: str, check: Callable[[], object], *,
                           every: float = PROBE_SECONDS, timeout: float = PROBE_TIMEOUT) -> None:
    """Run `check` (blocking: off the loop) every `every` seconds and tell `health` whether it answered
    within `timeout`. A check still running is waited for, never started twice."""
    pending: asyncio.Future[object] | None = None
    while True:
        if pending is None or pending.done():
            pending = asyncio.ensure_future(asyncio.to_thread(check))
        # Not wait_for(shield(...)): in Python 3.11 a cancellation arriving as the probe answers is
        # swallowed there, and the stopped service waited forever for this task (sluice.waiting).
        done, _ = await asyncio.wait((pending,), timeout=timeout)
        if not done:
            await health.dependency(name, f"no answer within {timeout:g} s")
        elif (error := pending.exception()) is not None:
            await health.dependency(name, " ".join(str(error).split()) or type(error).__name__)
        else:
            await health.dependency(name, None)
        await asyncio.sleep(every)


def event_log_check(event_log: object, timeout: float = PROBE_TIMEOUT) -> Callable[[], object]:
    """The event log's cheapest round trip: its `ping` where it has one, else its head position."""
    ping = getattr(event_log, "ping", None)
    if ping is not None:
        return lambda: ping(timeout)
    return getattr(event_log, "head_position")
