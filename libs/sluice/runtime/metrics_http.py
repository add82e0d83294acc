"""The metrics endpoint over HTTP (aiohttp): GET /metrics (Prometheus text format), GET /healthz (alive:
the process and its event loop answer) and GET /readyz (ready: recovered, dependencies reachable), see
sluice.runtime.health. With authorization on, /metrics needs metrics.read on every namespace; /healthz
and /readyz stay open."""
from __future__ import annotations

import ssl

from aiohttp import web

from sluice.runtime.authorization import Authorizer
from sluice.runtime.health import Health
from sluice.runtime.http_auth import loopback_host_middlewares, middlewares
from sluice.runtime.metrics import CONTENT_TYPE, Registry


def metrics_app(registry: Registry, authorizer: Authorizer | None = None, health: Health | None = None,
                bound_host: str = "") -> web.Application:
    """`health`: what /healthz and /readyz say (None: alive and ready, always); `bound_host`: the address
    served on (on loopback, only requests for a loopback name are answered)."""
    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=registry.render().encode(), headers={"Content-Type": CONTENT_TYPE})

    async def healthz(request: web.Request) -> web.Response:
        if health is None or health.alive():
            return web.Response(text="ok")
        return web.Response(status=503, text=f"event loop stalled for {health.stalled_for():.1f} s")

    async def readyz(request: web.Request) -> web.Response:
        if health is None or health.ready():
            return web.Response(text="ready")
        return web.Response(status=503, text=f"not ready: {health.why_not_ready()}")

    app = web.Application(middlewares=[*loopback_host_middlewares(bound_host), *middlewares(authorizer)])
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


async def start_metrics_server(registry: Registry, host: str = "127.0.0.1", port: int = 0,
                               authorizer: Authorizer | None = None,
                               ssl_context: ssl.SSLContext | None = None,
                               health: Health | None = None) -> tuple[web.AppRunner, int]:
    """Serve `registry` on host:port (0 picks a free port), over HTTPS with `ssl_context`; the runner
    (call `cleanup()` to stop) and the port."""
    runner = web.AppRunner(metrics_app(registry, authorizer, health, bound_host=host), access_log=None,
                           handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ssl_context)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner, runner.addresses[0][1]
