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

from sluice.v1 import datasets_pb2, schedules_pb2
from sluice_services.web import pages
from sluice_services.web.api import ConsoleApi, Identity, NotConnected

HERE = Path(__file__).resolve().parent
COOKIE = "sluice_console_token"
API_KEY = web.AppKey("api", object)
SECRET_KEY = web.AppKey("csrf_secret", bytes)
TEMPLATES_KEY = web.AppKey("templates", jinja2.Environment)
HTTP_STATUS = {grpc.StatusCode.PERMISSION_DENIED: 403, grpc.StatusCode.NOT_FOUND: 404,
               grpc.StatusCode.INVALID_ARGUMENT: 400, grpc.StatusCode.FAILED_PRECONDITION: 409,
               grpc.StatusCode.UNAVAILABLE: 503, grpc.StatusCode.DEADLINE_EXCEEDED: 504}
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
ACTIONS = {
    # name -> (title, verb, permission, gRPC call building its request from the form's id)
    "enable": ("Enable schedule", "Enable", "schedules.write",
               ("ScheduleRegistry", "EnableSchedule", lambda i: schedules_pb2.EnableScheduleRequest(id=i))),
    "disable": ("Disable schedule", "Disable", "schedules.write",
                ("ScheduleRegistry", "DisableSchedule", lambda i: schedules_pb2.DisableScheduleRequest(id=i))),
    "release": ("Release quarantined commit sequence", "Release", "commits.release",
                ("Partitions", "ReleaseCommitSequence", lambda i: datasets_pb2.ReleaseCommitSequenceRequest(id=i))),
}
OPTIONAL = {"run-now": "run_now", "cancel": "cancel_run", "replay": "replay_dead_letter"}


def build_app(api: ConsoleApi, *, secure_cookie: bool = False) -> web.Application:
    app = web.Application(middlewares=[_errors, _headers])
    app[API_KEY] = api
    app[SECRET_KEY] = secrets.token_bytes(32)
    app[TEMPLATES_KEY] = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"),
                                            autoescape=True, undefined=jinja2.StrictUndefined)
    app["secure_cookie"] = secure_cookie
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
        web.get("/dead-letters", _dead_letters),
        web.get("/confirm/{action}/{id}", _confirm),
        web.post("/actions/{action}/{id}", _act),
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


async def _dead_letters(request: web.Request) -> web.Response:
    me = await _identity(request)
    return _render(request, "dead_letters.html", me=me,
                   replay=request.app[API_KEY].optional_method("replay_dead_letter") is not None)


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
        response.set_cookie(COOKIE, token, httponly=True, samesite="Strict", secure=request.app["secure_cookie"],
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
    action, target = request.match_info["action"], request.match_info["id"]
    if action in ACTIONS:
        title, verb, permission, _ = ACTIONS[action]
    elif action in OPTIONAL and request.app[API_KEY].optional_method(OPTIONAL[action]):
        title, verb, permission = action.replace("-", " ").capitalize(), action.replace("-", " ").capitalize(), ""
    else:
        raise web.HTTPNotFound(text=f"404: no action {action!r} (its gRPC method does not exist)")
    return _render(request, "confirm.html", me=me, title=title, verb=verb, permission=permission, action=action,
                   target=target, back=_local(request.query.get("back", "")))


async def _act(request: web.Request) -> web.Response:
    form = await _check_csrf(request)
    await _identity(request)
    action, target = request.match_info["action"], request.match_info["id"]
    api, token = request.app[API_KEY], _token(request)
    if action in ACTIONS:
        service, method, build = ACTIONS[action][3]
        await asyncio.to_thread(api.call, token, service, method, build(target))
    elif action in OPTIONAL and api.optional_method(OPTIONAL[action]):
        await asyncio.to_thread(api.call_optional, token, OPTIONAL[action], {"id": target})
    else:
        raise web.HTTPNotFound(text=f"404: no action {action!r}")
    raise web.HTTPSeeOther(_local(str(form.get("back", ""))))


def _local(path: str) -> str:
    """`path` when it is a path of this console (no scheme, host or backslash), else /schedules."""
    if path.startswith("/") and not path.startswith("//") and "\\" not in path and ":" not in path.split("?")[0]:
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
