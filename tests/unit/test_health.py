"""Alive and ready, apart (sluice.runtime.health): readiness follows recovery and the dependency
probe, liveness the event loop's ticks; /healthz and /readyz say which."""
from __future__ import annotations

import asyncio
import logging
import threading
import time

import aiohttp
import pytest
from aiohttp import web

from sluice.runtime.health import Health, watch_dependency
from sluice.runtime.metrics import Registry
from sluice.runtime.metrics_http import metrics_app
from tests.support.waiting import until


async def test_not_ready_until_recovered_nor_while_a_dependency_fails_and_listeners_hear_each_change() -> None:
    health, heard = Health(), []

    async def listener(ready: bool) -> None:
        heard.append(ready)

    health.listen(listener)
    assert not health.ready() and health.why_not_ready() == "recovering"
    await health.recovered()
    assert health.ready()
    await health.dependency("event log", "connection refused")
    await health.dependency("event log", "connection refused")  # the same: no change
    assert not health.ready() and health.why_not_ready() == "event log unreachable: connection refused"
    await health.dependency("event log", None)
    assert health.ready()
    assert heard == [True, False, True]


async def test_the_probe_flips_readiness_while_its_check_fails_and_back() -> None:
    health, failing, calls = Health(), threading.Event(), []
    await health.recovered()

    def check() -> None:
        calls.append(1)
        if failing.is_set():
            raise ConnectionError("server down")

    probe = asyncio.create_task(watch_dependency(health, "event log", check, every=0.02, timeout=1.0))
    try:
        failing.set()
        await until(lambda: not health.ready(), "not ready", timeout=5)
        assert "server down" in health.why_not_ready()
        failing.clear()
        await until(health.ready, "ready", timeout=5)
    finally:
        probe.cancel()


async def test_a_check_that_hangs_is_a_failure_and_is_never_started_twice() -> None:
    health, release, started = Health(), threading.Event(), []
    await health.recovered()

    def check() -> None:
        started.append(1)
        release.wait(5)

    probe = asyncio.create_task(watch_dependency(health, "event log", check, every=0.01, timeout=0.05))
    try:
        await until(lambda: not health.ready(), "not ready", timeout=5)
        assert "no answer within 0.05 s" in health.why_not_ready()
        await asyncio.sleep(0.2)
        assert len(started) == 1
        release.set()
        await until(health.ready, "ready", timeout=5)
    finally:
        release.set()
        probe.cancel()


async def test_a_stalled_event_loop_is_not_alive_and_the_watchdog_says_where_it_is(
        caplog: pytest.LogCaptureFixture) -> None:
    health = Health(stall_after=0.3)
    beat = asyncio.create_task(health.beat(every=0.01))
    seen: list[bool] = []
    watching = threading.Event()

    def watch() -> None:
        while not watching.is_set():
            seen.append(health.alive())
            time.sleep(0.02)

    await asyncio.sleep(0.05)
    assert health.alive()
    watcher = threading.Thread(target=watch)
    watcher.start()
    with caplog.at_level(logging.ERROR, logger="sluice.runtime.health"):
        time.sleep(1.5)  # blocks the loop: no tick
        await asyncio.sleep(0.05)
    watching.set()
    watcher.join()
    beat.cancel()
    assert False in seen and health.alive()
    assert any("event loop stalled" in r.message and "test_a_stalled_event_loop" in r.message for r in caplog.records)


async def test_healthz_and_readyz_answer_apart() -> None:
    health = Health()
    runner = web.AppRunner(metrics_app(Registry(), None, health))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        async with aiohttp.ClientSession() as session:
            async def get(path: str) -> tuple[int, str]:
                async with session.get(base + path) as response:
                    return response.status, await response.text()

            assert await get("/healthz") == (200, "ok")
            assert await get("/readyz") == (503, "not ready: recovering")
            await health.recovered()
            assert await get("/readyz") == (200, "ready")
            await health.dependency("event log", "connection refused")
            assert await get("/readyz") == (503, "not ready: event log unreachable: connection refused")
            assert await get("/healthz") == (200, "ok")
            health._loop_thread, health._tick = threading.get_ident(), time.monotonic() - 60  # as if stalled
            status, text = await get("/healthz")
            assert status == 503 and text.startswith("event loop stalled for")
    finally:
        await runner.cleanup()


