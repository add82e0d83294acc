"""The metrics endpoint over HTTP (aiohttp): GET /metrics (Prometheus text format), GET /healthz."""
from __future__ import annotations

from aiohttp import web

from sluice.runtime.metrics import CONTENT_TYPE, Registry


def metrics_app(registry: Registry) -> web.Application:
    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=registry.render().encode(), headers={"Content-Type": CONTENT_TYPE})

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    return app


async def start_metrics_server(registry: Registry, host: str = "127.0.0.1", port: int = 0) -> tuple[web.AppRunner, int]:
    """Serve `registry` on host:port (0 picks a free port); the runner (call `cleanup()` to stop) and the port."""
    runner = web.AppRunner(metrics_app(registry), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner, runner.addresses[0][1]
