"""The web console's HTTP side (aiohttp + Jinja2; htmx served from static/, nothing from a CDN).

Credentials: the user signs in with a bearer token, kept in an HttpOnly, SameSite=Strict cookie
(Secure under HTTPS) and forwarded on every gRPC call; the servers' authorization decides, and a
PERMISSION_DENIED becomes a 403 page naming the permission. Access.WhoAmI tells which actions to
offer. With authorization off (WhoAmI says so) nobody signs in and every action is offered, as the
CLI does. Every POST carries a CSRF token: an HMAC of the session under a key made at start."""
from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
from pathlib import Path
from typing import Any, Awaitable, Callable

import grpc
import jinja2
from aiohttp import web

from sluice.runtime.http_auth import loopback_host_middlewares
from sluice_services.web import pages
from sluice_services.web.actions import ACTIONS, Action, permission_of
from sluice_services.web.api import ConsoleApi, Identity, NotConnected

HERE = Path(__file__).resolve().parent
COOKIE = "sluice_console_token"
API_KEY = web.AppKey("api", object)
SECRET_KEY = web.AppKey("csrf_secret", bytes)
TEMPLATES_KEY = web.AppKey("templates", jinja2.Environment)
SECURE_COOKIE_KEY = web.AppKey("secure_cookie", bool)
HTTP_STATUS = {grpc.StatusCode.PERMISSION_DENIED: 403, grpc.StatusCode.NOT_FOUND: 404,
               grpc.StatusCode.INVALID_ARGUMENT: 400, grpc.StatusCode.FAILED_PRECONDITION: 409,
               grpc.StatusCode.UNAVAILABLE: 503, grpc.StatusCode.DEADLINE_EXCEEDED: 504}
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "frame-ancestors 'none'; form-action 'self'; base-uri 'none'")


def build_app(api: ConsoleApi, *, secure_cookie: bool = False, bound_host: str = "") -> web.Application:
    """`bound_host`: the address served on (on loopback, only requests for a loopback name are answered)."""
    app = web.Application(middlewares=[*loopback_host_middlewares(bound_host), _errors, _headers])
    app[API_KEY] = api
    app[SECRET_KEY] = secrets.token_bytes(32)
    app[TEMPLATES_KEY] = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"),
                                            autoescape=True, undefined=jinja2.StrictUndefined)
    app[TEMPLATES_KEY].globals["permission"] = lambda name: permission_of(ACTIONS[name])
    app[SECURE_COOKIE_KEY] = secure_cookie
    app.add_routes([
        web.get("/", lambda request: _redirect("/schedules")),
        web.get("/login", _login_form), web.post("/login", _login), web.post("/logout", _logout),
        web.get("/schedules", _page("schedules.html", pages.schedules)),
        web.get("/schedules/{id}/last-runs", _last_runs),
        web.get("/jobs", _page("jobs.html", pages.jobs)),
        web.get("/runs", _page("runs.html", pages.runs)),
        web.get("/runs/{id}", _run),
        web.get("/datasets", _page("datasets.html", pages.datasets)),
        web.get("/datasets/{namespace}/{name}", _dataset),
        web.get("/lineage", _page("lineage.html", pages.lineage)),
        web.get("/runs/{id}/log", _run_log),
        web.get("/dead-letters", _page("dead_letters.html", pages.dead_letters)),
        web.get("/events", _page("events.html", pages.streams)),
        web.get("/sla-misses", _page("sla_misses.html", pages.sla_misses)),
        web.get("/backfills", _page("backfills.html", pages.backfills)),
        web.get("/events/{stream}", _stream),
        web.get("/confirm/{action}/{id:.+}", _confirm),
        web.post("/actions/{action}/{id:.+}", _act),
        web.static("/static", HERE / "static"),
    ])
    return app


def _redirect(location: str) -> web.Response:
    raise web.HTTPSeeOther(location)


def _token(request: web.Request) -> str:
    return request.cookies.get(COOKIE, "")


def _csrf(request: web.Request) -> str:
    return hmac.new(request.app[SECRET_KEY], ("session:" + _token(request)).encode(), hashlib.sha256).hexdigest()


async def _identity(request: web.Request) -> Identity:
    """Who the user is; redirects to the sign-in form when the servers want credentials it lacks."""
    token = _token(request)
    try:
        return await asyncio.to_thread(request.app[API_KEY].whoami, token)
    except grpc.RpcError as error:
        if error.code() == grpc.StatusCode.UNAUTHENTICATED:
            response = web.HTTPSeeOther("/login" + ("?expired=1" if token else ""))
            response.del_cookie(COOKIE)
            raise response
        raise


def _render(request: web.Request, template: str, http_status: int = 200, **context: Any) -> web.Response:
    page = request.app[TEMPLATES_KEY].get_template(template)
    context.setdefault("me", None)
    html = page.render(csrf=_csrf(request), path=request.path, signed_in=bool(_token(request)), **context)
    return web.Response(text=html, status=http_status, content_type="text/html")


def _page(template: str, gather: Callable[..., dict[str, Any]]) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        me = await _identity(request)
        context = await asyncio.to_thread(gather, request.app[API_KEY], _token(request), me, dict(request.query))
        return _render(request, template, me=me, **context)
    return handler


async def _last_runs(request: web.Request) -> web.Response:
    await _identity(request)
    context = await asyncio.to_thread(pages.last_runs, request.app[API_KEY], _token(request), request.match_info["id"])
    return _render(request, "last_runs.html", **context)


async def _run(request: web.Request) -> web.Response:
    me = await _identity(request)
    context = await asyncio.to_thread(pages.run, request.app[API_KEY], _token(request), me, request.match_info["id"])
    return _render(request, "run.html", me=me, **context)


async def _dataset(request: web.Request) -> web.Response:
    me = await _identity(request)
    context = await asyncio.to_thread(pages.dataset, request.app[API_KEY], _token(request), me,
                                      request.match_info["namespace"], request.match_info["name"], dict(request.query))
    return _render(request, "dataset.html", me=me, **context)


async def _run_log(request: web.Request) -> web.Response:
    """The log after `from` (htmx polls this fragment to follow a run going)."""
    await _identity(request)
    context = await asyncio.to_thread(pages.run_log, request.app[API_KEY], _token(request), request.match_info["id"],
                                      dict(request.query))
    return _render(request, "run_log.html", log=context)


async def _stream(request: web.Request) -> web.Response:
    me = await _identity(request)
    context = await asyncio.to_thread(pages.stream, request.app[API_KEY], _token(request),
                                      request.match_info["stream"], dict(request.query))
    return _render(request, "stream.html", me=me, **context)


async def _login_form(request: web.Request) -> web.Response:
    return _render(request, "login.html", error="Your session ended: sign in again." if request.query.get("expired")
                   else "")


async def _login(request: web.Request) -> web.Response:
    form = await _check_csrf(request)
    token = str(form.get("token", "")).strip()
    try:
        me = await asyncio.to_thread(request.app[API_KEY].whoami, token)
    except grpc.RpcError as error:
        if error.code() != grpc.StatusCode.UNAUTHENTICATED:
            raise
        return _render(request, "login.html", http_status=401, error="The servers do not know this token.")
    response = web.HTTPSeeOther("/schedules")
    if me.authorization and token:
        response.set_cookie(COOKIE, token, httponly=True, samesite="Strict", secure=request.app[SECURE_COOKIE_KEY],
                            path="/")
    raise response


async def _logout(request: web.Request) -> web.Response:
    await _check_csrf(request)
    response = web.HTTPSeeOther("/login")
    response.del_cookie(COOKIE, path="/")
    raise response


async def _check_csrf(request: web.Request) -> Any:
    form = await request.post()
    if not hmac.compare_digest(str(form.get("csrf", "")), _csrf(request)):
        raise web.HTTPForbidden(text="403 Forbidden: the form's CSRF token is missing or wrong; reload the page.")
    return form


async def _confirm(request: web.Request) -> web.Response:
    me = await _identity(request)
    action, target = _action(request.match_info["action"]), request.match_info["id"]
    return _render(request, "confirm.html", me=me, title=action.title, verb=action.verb,
                   permission=permission_of(action), action=request.match_info["action"], target=target,
                   back=_local(request.query.get("back", "")))


async def _act(request: web.Request) -> web.Response:
    form = await _check_csrf(request)
    await _identity(request)
    action, target = _action(request.match_info["action"]), request.match_info["id"]
    await asyncio.to_thread(request.app[API_KEY].call, _token(request), action.service, action.method,
                            action.request(target))
    raise web.HTTPSeeOther(_local(str(form.get("back", ""))))


def _action(name: str) -> Action:
    if name not in ACTIONS:
        raise web.HTTPNotFound(text=f"404: no action {name!r}")
    return ACTIONS[name]


def _local(path: str) -> str:
    """`path` when it is a path of this console (no scheme, host or backslash, nor a space or control
    character: a browser drops a tab or newline, so "/\\t/evil.example" would be "//evil.example"), else /schedules."""
    if (path.startswith("/") and not path.startswith("//") and "\\" not in path and ":" not in path.split("?")[0]
            and path.isprintable() and " " not in path):
        return path
    return "/schedules"


@web.middleware
async def _errors(request: web.Request, handler: Callable) -> web.StreamResponse:
    try:
        return await handler(request)
    except NotConnected:
        return _render(request, "error.html", http_status=503, code="UNAVAILABLE", me=None,
                       details="the console is starting: the gRPC server is not serving yet")
    except grpc.RpcError as error:
        code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
        status = HTTP_STATUS.get(code, 502)
        return _render(request, "error.html", http_status=status, code=code.name, details=error.details() or "",
                       me=None)


@web.middleware
async def _headers(request: web.Request, handler: Callable) -> web.StreamResponse:
    response = await handler(request)
    response.headers.setdefault("Content-Security-Policy", CSP)
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Referrer-Policy", "same-origin")
    if not request.path.startswith("/static/"):
        response.headers.setdefault("Cache-Control", "no-store")
    return response
