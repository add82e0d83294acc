"""Marquez's read paths over the lineage projection, as the Marquez web UI calls them.

    GET /api/v1/namespaces                                        namespaces of jobs and datasets
    GET /api/v1/namespaces/{ns}                                   one namespace
    GET /api/v1/namespaces/{ns}/jobs                              jobs living in it (seed 002: a child in its root's)
    GET /api/v1/namespaces/{ns}/jobs/{job}                        a job by fully qualified name, with its facets;
                                                                  under its own namespace or by a unique simple
                                                                  name 301 to where it lives, 300 when ambiguous
    GET /api/v1/namespaces/{ns}/jobs/{job}/runs                   its runs, newest first, with their facets
    GET /api/v1/namespaces/{ns}/datasets                          datasets of the namespace
    GET /api/v1/namespaces/{ns}/datasets/{dataset}                one, its fields from its schema facet
    GET /api/v1/namespaces/{ns}/datasets/{dataset}/versions       one version per run that wrote it, newest first
    GET /api/v1/jobs/runs/{run}                                   one run
    GET /api/v1/jobs/runs/{run}/facets?type=run|job               a run's facets, merged over its events
    GET /api/v1/search?q=&filter=JOB|DATASET&sort=NAME|UPDATE_AT  jobs and datasets whose name contains q
    GET /api/v1/events/lineage?before=&after=&sortDirection=      the recorded run events

Listings take Marquez's `limit` and `offset` (whole numbers from 0; limit at most MAX_LIMIT) and say
`totalCount`. Errors are JSON {"code", "message", "error"}: 400 naming the parameter, 404 naming what
was not found.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Callable
from urllib.parse import quote

from aiohttp import web

from sluice.domain.lineage import Job, LineageState, Run, dataset_of
from sluice_services.lineage import marquez
from sluice_services.lineage.service import LineageService

MAX_LIMIT = 10_000
_DESC, _ASC = "desc", "asc"


class Refused(Exception):
    """The answer instead of the resource: a 4xx (or 300) with its message and any more fields."""

    def __init__(self, status: int, message: str, **more: Any) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.more = more


def error(status: int, message: str, **more: Any) -> web.Response:
    return web.json_response({"code": status, "message": message, "error": message, **more}, status=status)


def paging(request: web.Request, default_limit: int) -> tuple[int, int]:
    return (_whole(request, "limit", default_limit, MAX_LIMIT), _whole(request, "offset", 0, None))


def _whole(request: web.Request, name: str, default: int, most: int | None) -> int:
    text = request.query.get(name, "")
    if text == "":
        return default
    bound = f"from 0 to {most}" if most is not None else "from 0"
    try:
        value = int(text)
    except ValueError:
        raise Refused(400, f"{name}: a whole number {bound} is required, got {text[:40]!r}") from None
    if value < 0 or (most is not None and value > most):
        raise Refused(400, f"{name}: must be {bound}, got {value}")
    return value


def _instant(request: web.Request, name: str) -> datetime | None:
    text = request.query.get(name, "")
    if text == "":
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise Refused(400, f"{name}: an ISO 8601 date-time is required, got {text[:40]!r}") from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def _choice(request: web.Request, name: str, allowed: tuple[str, ...], default: str) -> str:
    value = request.query.get(name, "") or default
    if value.upper() not in allowed:
        raise Refused(400, f"{name}: must be one of {', '.join(allowed)}, got {value[:40]!r}")
    return value.upper()


def page(items: list, limit: int, offset: int) -> list:
    return items[offset:offset + limit]


def handler(method: Callable) -> Callable:
    """A Refused raised while answering becomes its JSON error."""
    async def answer(self: MarquezRoutes, request: web.Request) -> web.StreamResponse:
        try:
            return await method(self, request)
        except Refused as refused:
            return error(refused.status, refused.message, **refused.more)
    return answer


class MarquezRoutes:
    def __init__(self, service: LineageService) -> None:
        self._service = service

    def routes(self) -> list[web.RouteDef]:
        ns = "/api/v1/namespaces/{namespace}"
        return [
            web.get("/api/v1/namespaces", self.namespaces),
            web.get(ns, self.namespace),
            web.get(f"{ns}/jobs", self.jobs),
            web.get(f"{ns}/jobs/{{job}}", self.job),
            web.get(f"{ns}/jobs/{{job}}/runs", self.runs),
            web.get(f"{ns}/datasets", self.datasets),
            web.get(f"{ns}/datasets/{{dataset}}", self.dataset),
            web.get(f"{ns}/datasets/{{dataset}}/versions", self.versions),
            web.get("/api/v1/jobs/runs/{run}", self.run),
            web.get("/api/v1/jobs/runs/{run}/facets", self.facets),
            web.get("/api/v1/search", self.search),
            web.get("/api/v1/events/lineage", self.events),
        ]

    @property
    def _state(self) -> LineageState:
        return self._service.state

    # -- namespaces -----------------------------------------------------------------------------

    def _namespace_spans(self, state: LineageState) -> dict[str, marquez.Span]:
        spans: dict[str, marquez.Span] = {}
        for home, jobs in marquez.jobs_by_home(state).items():
            for job in jobs:
                spans[home] = spans.get(home, marquez.Span()).widen(state.latest_run(job.key))
        for key in marquez.datasets(state):
            namespace, _ = dataset_of(key)
            spans.setdefault(namespace, marquez.Span())
        return spans

    @handler
    async def namespaces(self, request: web.Request) -> web.Response:
        limit, offset = paging(request, 100)
        spans = self._namespace_spans(self._state)
        shown = [marquez.namespace_json(name, spans[name].pair) for name in page(sorted(spans), limit, offset)]
        return web.json_response({"totalCount": len(spans), "namespaces": shown})

    @handler
    async def namespace(self, request: web.Request) -> web.Response:
        name = request.match_info["namespace"]
        spans = self._namespace_spans(self._state)
        if name not in spans:
            raise Refused(404, f"no namespace {name!r}")
        return web.json_response(marquez.namespace_json(name, spans[name].pair))

    # -- jobs and runs --------------------------------------------------------------------------

    @handler
    async def jobs(self, request: web.Request) -> web.Response:
        limit, offset = paging(request, 100)
        state = self._state
        found = marquez.jobs_by_home(state).get(request.match_info["namespace"], [])
        return web.json_response({"totalCount": len(found),
                                  "jobs": [marquez.job_json(state, job) for job in page(found, limit, offset)]})

    @handler
    async def job(self, request: web.Request) -> web.Response:
        state = self._state
        job = self._locate(state, request, "")
        latest = state.latest_run(job.key)
        facets = marquez.run_facets(self._service.events_of(latest.run_id), "job") if latest else {}
        return web.json_response(marquez.job_json(state, job, facets))

    @handler
    async def runs(self, request: web.Request) -> web.Response:
        limit, offset = paging(request, 100)
        state = self._state
        job = self._locate(state, request, "/runs")
        runs = sorted(state.runs_of(job.key), key=_newest_first, reverse=True)
        shown = [self._run_json(run) for run in page(runs, limit, offset)]
        return web.json_response({"totalCount": len(runs), "runs": shown})

    def _run_json(self, run: Run) -> dict[str, Any]:
        return marquez.run_json(run, marquez.run_facets(self._service.events_of(run.run_id), "run"))

    def _locate(self, state: LineageState, request: web.Request, suffix: str) -> Job:
        """The job living in the namespace under this fully qualified name; else a redirect to where
        it lives (its own namespace asked, or a unique simple name), 300 with the candidates, or 404."""
        namespace, name = request.match_info["namespace"], request.match_info["job"]
        named = [job for job in state.jobs.values() if job.name == name]
        at_home = [job for job in named if marquez.home_namespace(state, job) == namespace]
        if len(at_home) == 1:
            return at_home[0]
        if len(at_home) > 1:
            raise _ambiguous(name, [(namespace, job.name) for job in at_home], "several jobs from other namespaces")
        own = state.jobs.get((namespace, name))
        if own is not None:
            raise _moved(marquez.home_namespace(state, own), own.name, suffix)
        simple = [job for job in state.jobs.values() if job.simple_name == name
                  and namespace in (job.namespace, marquez.home_namespace(state, job))]
        if len(simple) == 1:
            raise _moved(marquez.home_namespace(state, simple[0]), simple[0].name, suffix)
        if simple:
            raise _ambiguous(name, sorted((marquez.home_namespace(state, j), j.name) for j in simple),
                             "several jobs have this simple name")
        raise Refused(404, f"no job {name!r} in namespace {namespace!r}")

    @handler
    async def run(self, request: web.Request) -> web.Response:
        return web.json_response(self._run_json(self._find_run(request)))

    @handler
    async def facets(self, request: web.Request) -> web.Response:
        part = _choice(request, "type", ("RUN", "JOB"), "run").lower()
        run = self._find_run(request)
        facets = marquez.run_facets(self._service.events_of(run.run_id), part)
        return web.json_response({"runId": run.run_id, "facets": facets})

    def _find_run(self, request: web.Request) -> Run:
        run_id = request.match_info["run"].lower()
        runs = self._state.runs
        if run_id not in runs:
            raise Refused(404, f"no run {request.match_info['run'][:80]!r}")
        return runs[run_id]

    # -- datasets -------------------------------------------------------------------------------

    @handler
    async def datasets(self, request: web.Request) -> web.Response:
        limit, offset = paging(request, 100)
        state, namespace = self._state, request.match_info["namespace"]
        found = [key for key in marquez.datasets(state) if dataset_of(key)[0] == namespace]
        shown = [self._dataset_json(state, key) for key in page(found, limit, offset)]
        return web.json_response({"totalCount": len(found), "datasets": shown})

    @handler
    async def dataset(self, request: web.Request) -> web.Response:
        state = self._state
        return web.json_response(self._dataset_json(state, self._find_dataset(state, request)))

    def _dataset_json(self, state: LineageState, key: str) -> dict[str, Any]:
        versions = marquez.versions_of(state, key)
        body = marquez.dataset_json(key, marquez.dataset_span(state, key).pair, self._facets_of(key, versions[:1]))
        body["currentVersion"] = marquez.version_of(key, versions[0]) if versions else None
        return body

    def _facets_of(self, key: str, runs: list[Run]) -> dict[str, Any]:
        return marquez.dataset_facets(self._service.events_of(runs[0].run_id), key) if runs else {}

    @handler
    async def versions(self, request: web.Request) -> web.Response:
        limit, offset = paging(request, 100)
        state = self._state
        key = self._find_dataset(state, request)
        runs = marquez.versions_of(state, key)
        shown = [marquez.version_json(key, run, self._facets_of(key, [run])) for run in page(runs, limit, offset)]
        return web.json_response({"totalCount": len(runs), "versions": shown})

    def _find_dataset(self, state: LineageState, request: web.Request) -> str:
        namespace, name = request.match_info["namespace"], request.match_info["dataset"]
        key = marquez.find_dataset(state, namespace, name)
        if key is None:
            raise Refused(404, f"no dataset {name!r} in namespace {namespace!r}")
        return key

    # -- search and events ----------------------------------------------------------------------

    @handler
    async def search(self, request: web.Request) -> web.Response:
        text = request.query.get("q", "").strip()
        if not text:
            raise Refused(400, "q: a text to search for is required")
        kind = _choice(request, "filter", ("ALL", "JOB", "DATASET"), "ALL")
        order = _choice(request, "sort", ("NAME", "UPDATE_AT"), "NAME")
        limit = _whole(request, "limit", 10, MAX_LIMIT)
        namespace, state, wanted = request.query.get("namespace", ""), self._state, text.lower()
        results = []
        if kind in ("ALL", "JOB"):
            for home, jobs in marquez.jobs_by_home(state).items():
                for job in (j for j in jobs if wanted in j.name.lower() and namespace in ("", home)):
                    latest = state.latest_run(job.key)
                    results.append(_hit("JOB", home, job.name, latest.last_event_time if latest else None))
        if kind in ("ALL", "DATASET"):
            for key in marquez.datasets(state):
                ns, name = dataset_of(key)
                if wanted in name.lower() and namespace in ("", ns):
                    results.append(_hit("DATASET", ns, name, marquez.dataset_span(state, key).last))
        if order == "NAME":
            results.sort(key=lambda hit: (hit["name"], hit["namespace"], hit["type"]))
        else:
            results.sort(key=lambda hit: (hit["updatedAt"] or "", hit["name"]), reverse=True)
        results = results[:limit]
        return web.json_response({"totalCount": len(results), "results": results})

    @handler
    async def events(self, request: web.Request) -> web.Response:
        limit, offset = paging(request, 100)
        before, after = _instant(request, "before"), _instant(request, "after")
        direction = _choice(request, "sortDirection", (_DESC.upper(), _ASC.upper()), _DESC)
        seen = sorted(((when, run_id, kind) for run_id, facts in self._state.facts.items() for kind, when in facts.seen
                       if (before is None or when <= before) and (after is None or when >= after)),
                      reverse=direction == _DESC.upper())
        shown, recorded = [], {}
        for when, run_id, kind in page(seen, limit, offset):
            if run_id not in recorded:
                recorded[run_id] = self._service.events_of(run_id)
            shown.extend(e for e in recorded[run_id] if _is(e, kind, when))
        return web.json_response({"totalCount": len(seen), "events": shown})


def _is(event: dict[str, Any], kind: str, when: datetime) -> bool:
    try:
        at = datetime.fromisoformat(event["eventTime"]).astimezone(timezone.utc)
    except (KeyError, TypeError, ValueError):
        return False
    return (event.get("eventType") or "OTHER") == kind and at == when


def _hit(kind: str, namespace: str, name: str, updated: datetime | None) -> dict[str, Any]:
    prefix = "job" if kind == "JOB" else "dataset"
    return {"type": kind, "name": name, "namespace": namespace, "updatedAt": marquez.iso(updated),
            "nodeId": f"{prefix}:{namespace}:{name}"}


def _moved(namespace: str, name: str, suffix: str) -> web.HTTPMovedPermanently:
    return web.HTTPMovedPermanently(f"/api/v1/namespaces/{quote(namespace, safe='')}/jobs/{quote(name, safe='')}{suffix}")


def _ambiguous(name: str, candidates: list[tuple[str, str]], why: str) -> Refused:
    return Refused(300, f"job {name!r} is ambiguous: {why}",
                   candidates=[{"namespace": ns, "name": n} for ns, n in candidates])


def _newest_first(run: Run) -> tuple:
    return (run.started_at or run.last_event_time or _EPOCH, run.run_id)


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
