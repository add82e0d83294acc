"""The metrics endpoint over HTTP (aiohttp): GET /metrics (Prometheus text format), GET /healthz.
With authorization on, /metrics needs metrics.read on every namespace; /healthz stays open."""
from __future__ import annotations

import ssl

from aiohttp import web

from sluice.runtime.authorization import Authorizer
from sluice.runtime.http_auth import middlewares
from sluice.runtime.metrics import CONTENT_TYPE, Registry


def metrics_app(registry: Registry, authorizer: Authorizer | None = None) -> web.Application:
    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=registry.render().encode(), headers={"Content-Type": CONTENT_TYPE})

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(middlewares=middlewares(authorizer))
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    return app


async def start_metrics_server(registry: Registry, host: str = "127.0.0.1", port: int = 0,
                               authorizer: Authorizer | None = None,
                               ssl_context: ssl.SSLContext | None = None) -> tuple[web.AppRunner, int]:
    """Serve `registry` on host:port (0 picks a free port), over HTTPS with `ssl_context`; the runner
    (call `cleanup()` to stop) and the port."""
    runner = web.AppRunner(metrics_app(registry, authorizer), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ssl_context)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner, runner.addresses[0][1]
