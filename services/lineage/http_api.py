"""The lineage service over HTTP: the OpenLineage HTTP transport's endpoint and a read API on
Marquez's paths, so the official clients and Marquez-minded tools work unchanged.

    POST /api/v1/lineage                                 a RunEvent (application/json, optionally gzip), 201
    GET  /api/v1/lineage?nodeId=job:ns:name&depth=N      the graph of jobs and datasets around a node
    GET  /api/v1/namespaces/..., /api/v1/search, ...     the rest of Marquez's read paths (marquez_routes)

A path with a trailing slash (the Marquez web UI asks /api/v1/lineage/?nodeId=...) redirects (308)
to the path without it.

With authorization on, every route asks the permission table (lineage.write to POST, lineage.read to
GET, on the namespace of the job or node): 401 without a known token, 403 naming what is lacking.

A POST must say Content-Type: application/json (415 otherwise, as Marquez answers): a web page can send
any other body type cross-site without the browser asking first (a CORS "simple request"), so with
authorization off any page its visitor's browser opened could otherwise record lineage events here.
"""
from __future__ import annotations

import json
import ssl
import zlib

from aiohttp import ClientPayloadError, hdrs, web
from aiohttp.http_exceptions import ContentEncodingError
from aiohttp.web_protocol import RequestPayloadError

from sluice.domain.bounds import lone_surrogate_error
from sluice.runtime.access import ANY_NAMESPACE, Grant, Principal, Role
from sluice.runtime.auth_policy import TokenAuthenticator
from sluice.runtime.authorization import Authorizer
from sluice.runtime.http_auth import loopback_host_middlewares, middlewares
from sluice.runtime.permissions import LINEAGE_BODY, UNRESOLVED, Target, lineage_event_target
from sluice.runtime.errors import MalformedMessage
from sluice_services.lineage.marquez_routes import MarquezRoutes, error as _error
from sluice_services.lineage.queries import DEFAULT_DEPTH, MAX_DEPTH, Graph
from sluice_services.lineage.service import LineageService

MAX_BODY_BYTES = 1024 * 1024
"""A run event is a few kB; a larger body (compressed or not) is refused with 413."""


def application(service: LineageService, token: str = "", authorizer: Authorizer | None = None,
                bound_host: str = "") -> web.Application:
    """With `authorizer` (the server's), every route is authorized against the permission
    table; `token` (--lineage-token) is one more principal, an operator of every namespace, and turns
    authorization on by itself. `bound_host`: the address served on (on loopback, only requests for a
    loopback name are answered)."""
    authorizer = _with_lineage_token(authorizer, token)
    if authorizer is not None:
        authorizer = Authorizer(authorizer.authenticators, {**authorizer.resolvers, LINEAGE_BODY: _body_target})
    without_slash = web.normalize_path_middleware(append_slash=False, remove_slash=True,
                                                  redirect_class=web.HTTPPermanentRedirect)
    app = web.Application(client_max_size=MAX_BODY_BYTES + 1,
                          middlewares=[*loopback_host_middlewares(bound_host), without_slash, *middlewares(authorizer)])
    routes = _Routes(service)
    app.add_routes([
        web.post("/api/v1/lineage", routes.ingest),
        web.get("/api/v1/lineage", routes.lineage),
        *MarquezRoutes(service).routes(),
    ])
    return app


async def serve(service: LineageService, host: str, port: int, token: str = "", *,
                authorizer: Authorizer | None = None, ssl_context: ssl.SSLContext | None = None) -> web.AppRunner:
    """`ssl_context`: speak HTTPS (the server's certificate, sluice.runtime.http_auth.server_ssl_context)."""
    runner = web.AppRunner(application(service, token, authorizer, bound_host=host), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port, ssl_context=ssl_context).start()
    return runner


def _with_lineage_token(authorizer: Authorizer | None, token: str) -> Authorizer | None:
    if not token:
        return authorizer
    lineage = TokenAuthenticator(token, Principal("token:lineage", (Grant(Role.OPERATOR, ANY_NAMESPACE),)))
    if authorizer is None:
        return Authorizer([lineage])
    return Authorizer([*authorizer.authenticators, lineage], authorizer.resolvers)


async def _body_target(request: web.Request) -> list[Target]:
    """The posted event's job namespace (the body is read once, bounded, and kept for the handler)."""
    body = await _body(request)
    return [lineage_event_target(body)] if isinstance(body, bytes) else [UNRESOLVED]


async def _body(request: web.Request) -> bytes | web.Response:
    """The request's body read at most once: the bytes, or the 4xx answer when unreadable or too big."""
    if _BODY not in request:
        gzipped = request.headers.get("Content-Encoding", "").lower() == "gzip"
        try:  # aiohttp inflates a gzip body as it is read: stopping at the limit bounds a zip bomb
            body = await _read_at_most(request, MAX_BODY_BYTES)
        except (ContentEncodingError, ClientPayloadError, RequestPayloadError, zlib.error) as error:
            body = _error(400, f"body: not gzip ({error})")
        if body is None:
            body = _error(413, f"body over {MAX_BODY_BYTES} bytes" + (" once decompressed" if gzipped else ""))
        request[_BODY] = body
    return request[_BODY]


_BODY: web.RequestKey[bytes | web.Response] = web.RequestKey("sluice_body", object)


def bound_port(runner: web.AppRunner) -> int:
    return runner.addresses[0][1]


class _Routes:
    def __init__(self, service: LineageService) -> None:
        self._service = service

    async def ingest(self, request: web.Request) -> web.Response:
        if request.content_type != "application/json":
            declared = request.headers.get(hdrs.CONTENT_TYPE)
            return _error(415, "Content-Type: application/json is required, got "
                               + (repr(declared) if declared is not None else "none"))
        body = await _body(request)
        if isinstance(body, web.Response):
            return body
        try:
            parsed = json.loads(body)
        except (ValueError, UnicodeDecodeError) as error:
            return _error(400, f"body: not JSON ({error})")
        except RecursionError:
            return _error(400, "body: JSON nested too deeply")
        if (unicode_error := lone_surrogate_error(body, parsed)) is not None:
            return _error(400, f"body: {unicode_error}")
        try:
            self._service.handle_message(body)
        except MalformedMessage as error:
            return _error(422, str(error))
        return web.json_response({}, status=201)

    async def lineage(self, request: web.Request) -> web.Response:
        node = request.query.get("nodeId", "")
        try:
            depth = int(request.query.get("depth", str(DEFAULT_DEPTH)))
        except ValueError:
            return _error(400, f"depth: a whole number is required, got {request.query.get('depth')!r}")
        if not 0 <= depth <= MAX_DEPTH:
            return _error(400, f"depth: must be from 0 to {MAX_DEPTH}, got {depth}")
        graph = Graph(self._service.state)
        start = graph.find(node)
        if start is None:
            return _error(404, f"nodeId: no node {node!r} (job:<namespace>:<name> or dataset:<namespace>:<name>)")
        return web.json_response({"graph": graph.around(start, depth)})


async def _read_at_most(request: web.Request, limit: int) -> bytes | None:
    """The body, or None when it is longer than `limit` bytes."""
    chunks, size = [], 0
    while chunk := await request.content.read(64 * 1024):
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)
