"""The HTTP side's access (lineage HTTP API, metrics, the console): one aiohttp middleware that authenticates
and authorizes every route against the permission table (GET /healthz aside), one that keeps a server bound
to loopback to requests for a loopback name, and TLS with the server's certificate. A refusal is 401
(unauthenticated, with WWW-Authenticate), 403 naming the permission, or 421 naming the Host."""
from __future__ import annotations

import ssl
from typing import Any, Awaitable, Callable
from urllib.parse import urlsplit

from aiohttp import hdrs, web

from sluice.runtime.authorization import Authorizer, bearer_of
from sluice.runtime.grpc_security import GrpcSecurity, loopback
from sluice.runtime.permissions import HTTP_RULES, OPEN_ROUTES

SEND_TOKEN = "send the header 'Authorization: Bearer <token>'"
_SHORT_NAMES = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU", "countryName": "C",
                "localityName": "L", "stateOrProvinceName": "ST", "domainComponent": "DC", "userId": "UID"}


def authorization_middleware(authorizer: Authorizer) -> Callable:
    @web.middleware
    async def authorize(request: web.Request, handler: Callable[[web.Request], Awaitable[Any]]) -> Any:
        route = request.match_info.route.resource
        key = (request.method, route.canonical if route is not None else "")
        if route is None or key in OPEN_ROUTES:
            return await handler(request)  # unknown paths end 404 (or 405) as before
        rule = HTTP_RULES.get(key)
        if rule is None:
            return _refused(403, f"{key[0]} {key[1]} has no entry in the permission table")
        bearer, presented = bearer_of(request.headers.get("Authorization"))
        principal = authorizer.authenticate(bearer, peer_subject(request))
        if principal is None:
            reason = "the bearer token is not this server's" if presented else "a bearer token is required"
            return _refused(401, f"{reason}: {SEND_TOKEN}", {"WWW-Authenticate": 'Bearer realm="sluice"'})
        refusal = await authorizer.check(principal, rule, request)
        if refusal is not None:
            return _refused(403, refusal.message)
        return await handler(request)

    return authorize


def middlewares(authorizer: Authorizer | None) -> list:
    return [] if authorizer is None else [authorization_middleware(authorizer)]


def loopback_host_middlewares(bound_host: str) -> list:
    """For a server bound to loopback: each request's Host header must name a loopback host too. A web page
    whose own name its DNS turns into 127.0.0.1 (DNS rebinding) is then same-origin with the server, and
    could read its pages and post its actions with the browser of anyone on this machine; the browser sends
    the page's name as Host, so it is refused (421). A request without Host is no browser's."""
    if not loopback(bound_host):
        return []

    @web.middleware
    async def loopback_host(request: web.Request, handler: Callable[[web.Request], Awaitable[Any]]) -> Any:
        named = request.headers.get(hdrs.HOST)
        if named is None or _loopback_name(named):
            return await handler(request)
        return web.json_response({"error": f"Host {named!r} is not a loopback name, as this server is bound to "
                                           f"{bound_host}: ask it as 127.0.0.1 or localhost"}, status=421)

    return [loopback_host]


def _loopback_name(host_header: str) -> bool:
    try:
        name = urlsplit(f"//{host_header}").hostname or ""
    except ValueError:
        return False
    return loopback(name) or name.endswith(".localhost")  # browsers resolve *.localhost themselves


def peer_subject(request: web.Request) -> str | None:
    """The client certificate's subject as gRPC gives it (RFC 2253: last RDN first), e.g. "CN=ingest"."""
    transport = request.transport
    certificate = transport.get_extra_info("peercert") if transport is not None else None
    if not certificate:
        return None
    parts = [f"{_SHORT_NAMES.get(name, name)}={value}" for rdn in certificate.get("subject", ()) for name, value in rdn]
    return ",".join(reversed(parts)) or None


def server_ssl_context(security: GrpcSecurity) -> ssl.SSLContext | None:
    """TLS with the gRPC server's certificate, client certificates required as there; None: plaintext."""
    if security.tls_cert is None or security.tls_key is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(security.tls_cert, security.tls_key)
    if security.tls_client_ca is not None:
        context.load_verify_locations(cafile=str(security.tls_client_ca))
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def _refused(status: int, reason: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": reason}, status=status, headers=headers)
