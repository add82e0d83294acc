"""Serving the console: beside `sluice standalone` (--web-port; it reads the standalone's own gRPC API,
as any client would) or alone as `sluice serve web` (reading each service's gRPC address)."""
from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import ssl
import sys
from typing import TYPE_CHECKING, Callable

from aiohttp import web

from sluice.runtime.grpc_security import loopback
from sluice.runtime.http_auth import server_ssl_context
from sluice.runtime.logs import configure_logging
from sluice_services.web.api import APIS, ConsoleApi, PendingApi
from sluice_services.web.app import build_app

if TYPE_CHECKING:
    from sluice_services.composition import Settings

DEFAULT_WEB_PORT = 8080
"""`sluice serve web` without --web-port."""


class Console:
    """The console's HTTP server, bound before the API it reads is known (standalone: its gRPC port)."""

    def __init__(self, runner: web.AppRunner, app: web.Application, port: int) -> None:
        self.runner, self.app, self.port = runner, app, port

    async def close(self) -> None:
        await self.runner.cleanup()


async def start_console(api: ConsoleApi | None, host: str, port: int, ssl_context: ssl.SSLContext | None,
                        ) -> tuple[Console, Callable[[ConsoleApi], None]]:
    """Bind host:port (0: a free one) and serve; `connect(api)` sets the API (until then: 503)."""
    holder: dict[str, ConsoleApi] = {}
    app = build_app(PendingApi(holder), secure_cookie=ssl_context is not None, bound_host=host)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ssl_context)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise

    def connect(connected: ConsoleApi) -> None:
        holder["api"] = connected

    if api is not None:
        connect(api)
    return Console(runner, app, runner.addresses[0][1]), connect


async def standalone_console(settings: "Settings") -> tuple[Console, Callable[[int], None]]:
    """The console of `sluice standalone --web-port`: bound now; `on_grpc_ready(port)` points it at
    the standalone's own gRPC server (over TLS with its certificate when it speaks TLS)."""
    security = settings.grpc_security
    console, connect = await start_console(None, settings.host, settings.web_port, server_ssl_context(security))
    grpc_host = settings.host if loopback(settings.host) and settings.host not in ("", "0.0.0.0", "::") else "127.0.0.1"

    def on_grpc_ready(port: int) -> None:
        address = f"{grpc_host}:{port}"
        options = {"tls_ca": security.tls_cert} if security.tls_cert is not None else {}
        connect(ConsoleApi({api: address for api in APIS}, **options))

    return console, on_grpc_ready


def run_web(args: argparse.Namespace) -> int:
    """`sluice serve web`: the console alone, reading the services at their addresses."""
    from sluice_services.config import ConfigError, load_settings

    try:
        settings = load_settings(args, "web")
    except ConfigError as error:
        print(f"sluice: error: {error}", file=sys.stderr)
        return 2
    security = settings.grpc_security
    if not loopback(settings.host) and security.tls_cert is None and not security.insecure:
        print(f"sluice: error: host {settings.host}: serving the console beyond loopback over plain HTTP would send "
              "users' tokens in clear: give --tls-cert and --tls-key, or --insecure", file=sys.stderr)
        return 2
    addresses = {api: getattr(args, f"{api}_server", None) or args.server for api in APIS}
    try:
        api = ConsoleApi(addresses, tls=args.tls, tls_ca=args.tls_ca, client_cert=args.client_cert,
                         client_key=args.client_key)
    except OSError as error:
        print(f"sluice: error: cannot read {error.filename}: {error.strerror}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level, settings.log_format)
    port = DEFAULT_WEB_PORT if settings.web_port is None else settings.web_port
    try:
        asyncio.run(_serve_web(api, settings.host, port, server_ssl_context(security), addresses))
    except OSError as error:
        print(f"sluice: error: {error}", file=sys.stderr)
        return 1
    finally:
        api.close()
    return 0


async def _serve_web(api: ConsoleApi, host: str, port: int, ssl_context: ssl.SSLContext | None,
                     addresses: dict[str, str]) -> None:
    console, _ = await start_console(api, host, port, ssl_context)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    apis = ", ".join(f"{name} {address}" for name, address in addresses.items())
    logging.getLogger(__name__).info("web console serving on %s:%d, reading %s", host, console.port, apis,
                                     extra={"service": "web"})
    print(f"sluice web ready on {host}:{console.port} (reading {apis})", flush=True)
    try:
        await stop.wait()
    finally:
        await console.close()
