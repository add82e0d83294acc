"""The lineage service over HTTP: the OpenLineage HTTP transport's endpoint and a read API on
Marquez's paths, so the official clients and Marquez-minded tools work unchanged.

    POST /api/v1/lineage                                 a RunEvent (JSON, optionally gzip), 201
    GET  /api/v1/namespaces/{ns}/jobs                    jobs of a namespace
    GET  /api/v1/namespaces/{ns}/jobs/{job}              a job by fully qualified name; a simple name
                                                         redirects (301) or lists the candidates (300)
    GET  /api/v1/namespaces/{ns}/jobs/{job}/runs         its runs, newest first
    GET  /api/v1/lineage?nodeId=job:ns:name&depth=N      the graph of jobs and datasets around a node
"""
from __future__ import annotations

import json
import zlib
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote

from aiohttp import ClientPayloadError, web
from aiohttp.http_exceptions import ContentEncodingError
from aiohttp.web_protocol import RequestPayloadError

from sluice.domain.lineage import Job, LineageState, Run
from sluice.runtime.errors import MalformedMessage
from sluice_services.lineage.service import LineageService

MAX_BODY_BYTES = 1024 * 1024
"""A run event is a few kB; a larger body (compressed or not) is refused with 413."""
MAX_DEPTH = 100


def application(service: LineageService, token: str = "") -> web.Application:
    app = web.Application(client_max_size=MAX_BODY_BYTES + 1)
    routes = _Routes(service, token)
    app.add_routes([
        web.post("/api/v1/lineage", routes.ingest),
        web.get("/api/v1/namespaces/{namespace}/jobs", routes.jobs),
        web.get("/api/v1/namespaces/{namespace}/jobs/{job}", routes.job),
        web.get("/api/v1/namespaces/{namespace}/jobs/{job}/runs", routes.runs),
        web.get("/api/v1/lineage", routes.lineage),
    ])
    return app


async def serve(service: LineageService, host: str, port: int, token: str = "") -> web.AppRunner:
    runner = web.AppRunner(application(service, token), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


def bound_port(runner: web.AppRunner) -> int:
    return runner.addresses[0][1]


class _Routes:
    def __init__(self, service: LineageService, token: str) -> None:
        self._service = service
        self._token = token

    async def ingest(self, request: web.Request) -> web.Response:
        if self._token and request.headers.get("Authorization", "") != f"Bearer {self._token}":
            return _error(401, "a valid bearer token is required (Authorization: Bearer ...)")
        gzipped = request.headers.get("Content-Encoding", "").lower() == "gzip"
        try:  # aiohttp inflates a gzip body as it is read: stopping at the limit bounds a zip bomb
            body = await _read_at_most(request, MAX_BODY_BYTES)
        except (ContentEncodingError, ClientPayloadError, RequestPayloadError, zlib.error) as error:
            return _error(400, f"body: not gzip ({error})")
        if body is None:
            return _error(413, f"body over {MAX_BODY_BYTES} bytes" + (" once decompressed" if gzipped else ""))
        try:
            json.loads(body)
        except (ValueError, UnicodeDecodeError) as error:
            return _error(400, f"body: not JSON ({error})")
        except RecursionError:
            return _error(400, "body: JSON nested too deeply")
        try:
            self._service.handle_message(body)
        except MalformedMessage as error:
            return _error(422, str(error))
        return web.json_response({}, status=201)

    async def jobs(self, request: web.Request) -> web.Response:
        namespace = request.match_info["namespace"]
        state = self._service.state
        found = sorted((job for (ns, _), job in state.jobs.items() if ns == namespace), key=lambda job: job.name)
        return web.json_response({"totalCount": len(found), "jobs": [_job_json(state, job) for job in found]})

    async def job(self, request: web.Request) -> web.Response:
        found = self._find(request, "")
        if isinstance(found, web.Response):
            return found
        return web.json_response(_job_json(self._service.state, found))

    async def runs(self, request: web.Request) -> web.Response:
        found = self._find(request, "/runs")
        if isinstance(found, web.Response):
            return found
        runs = _runs_of(self._service.state, found)
        return web.json_response({"totalCount": len(runs), "runs": [_run_json(run) for run in runs]})

    async def lineage(self, request: web.Request) -> web.Response:
        node = request.query.get("nodeId", "")
        try:
            depth = int(request.query.get("depth", "20"))
        except ValueError:
            return _error(400, f"depth: a whole number is required, got {request.query.get('depth')!r}")
        if not 0 <= depth <= MAX_DEPTH:
            return _error(400, f"depth: must be from 0 to {MAX_DEPTH}, got {depth}")
        graph = _Graph(self._service.state)
        start = graph.find(node)
        if start is None:
            return _error(404, f"nodeId: no node {node!r} (job:<namespace>:<name> or dataset:<namespace>:<name>)")
        return web.json_response({"graph": graph.around(start, depth)})

    def _find(self, request: web.Request, suffix: str) -> Job | web.Response:
        """The job by fully qualified name; by simple name a redirect, or the candidates when several."""
        namespace, name = request.match_info["namespace"], request.match_info["job"]
        jobs = self._service.state.jobs
        if (namespace, name) in jobs:
            return jobs[(namespace, name)]
        candidates = sorted(job.name for (ns, _), job in jobs.items() if ns == namespace and job.simple_name == name)
        if len(candidates) == 1:
            raise web.HTTPMovedPermanently(f"/api/v1/namespaces/{quote(namespace, safe='')}/jobs/"
                                           f"{quote(candidates[0], safe='')}{suffix}")
        if candidates:
            return web.json_response({"error": f"job {name!r} is ambiguous: several jobs have this simple name",
                                      "candidates": [{"namespace": namespace, "name": c} for c in candidates]},
                                     status=300)
        return _error(404, f"no job {name!r} in namespace {namespace!r}")


async def _read_at_most(request: web.Request, limit: int) -> bytes | None:
    """The body, or None when it is longer than `limit` bytes."""
    chunks, size = [], 0
    while chunk := await request.content.read(64 * 1024):
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _error(status: int, reason: str) -> web.Response:
    return web.json_response({"error": reason}, status=status)


def _runs_of(state: LineageState, job: Job) -> list[Run]:
    return sorted(state.runs_of(job.key), key=_newest_first, reverse=True)


def _newest_first(run: Run) -> tuple:
    return (run.started_at or run.last_event_time or _EPOCH, run.run_id)


def _job_json(state: LineageState, job: Job) -> dict[str, Any]:
    inputs, outputs = state.datasets_of(job.key)
    latest = state.latest_run(job.key)
    return {
        "id": {"namespace": job.namespace, "name": job.name},
        "type": "BATCH",
        "name": job.name,
        "simpleName": job.simple_name,
        "parentJobName": job.parent_job_name,
        "namespace": job.namespace,
        "inputs": [_dataset_id(d) for d in inputs],
        "outputs": [_dataset_id(d) for d in outputs],
        "latestRun": _run_json(latest) if latest else None,
    }


def _run_json(run: Run) -> dict[str, Any]:
    return {
        "id": run.run_id,
        "state": run.state,
        "jobName": run.job_name,
        "jobNamespace": run.job_namespace,
        "parentRunId": run.parent_run_id,
        "startedAt": run.started_at.isoformat() if run.started_at else None,
        "endedAt": run.ended_at.isoformat() if run.ended_at else None,
        "inputs": [_dataset_id(d) for d in run.inputs],
        "outputs": [_dataset_id(d) for d in run.outputs],
        "partitions": [_partition_json(p) for p in run.partitions],
    }


def _partition_json(qualified: str) -> dict[str, Any]:
    dataset, _, keys = qualified.partition(":")
    return {**_dataset_id(dataset), "dimensions": dict(pair.split("=", 1) for pair in keys.split(",") if pair)}


def _dataset_id(qualified: str) -> dict[str, str]:
    namespace, _, name = qualified.partition("/")
    return {"namespace": namespace, "name": name}


Node = tuple[str, Any]   # ("job", (namespace, name)) or ("dataset", "namespace/name")


class _Graph:
    """Jobs and datasets as nodes; a job's runs read its inputs and wrote its outputs. Walks the
    state's maintained edges out from the start node, so a query costs the size of its answer."""

    def __init__(self, state: LineageState) -> None:
        self._state = state

    def find(self, node_id: str) -> Node | None:
        """The node a nodeId names, None if there is none. A namespace may contain ':' (s3://...)."""
        kind, _, rest = node_id.partition(":")
        for at in (i for i, c in enumerate(rest) if c == ":"):
            namespace, name = rest[:at], rest[at + 1:]
            if kind == "job" and (namespace, name) in self._state.jobs:
                return "job", (namespace, name)
            if kind == "dataset" and any(self._state.jobs_of(f"{namespace}/{name}")):
                return "dataset", f"{namespace}/{name}"
        return None

    def _edges(self, node: Node) -> list[tuple[Node, Node]]:
        kind, key = node
        if kind == "job":
            inputs, outputs = self._state.datasets_of(key)
            return [(("dataset", d), node) for d in inputs] + [(node, ("dataset", d)) for d in outputs]
        readers, writers = self._state.jobs_of(key)
        return [(node, ("job", j)) for j in readers] + [(("job", j), node) for j in writers]

    def around(self, start: Node, depth: int) -> list[dict[str, Any]]:
        edges = {start: self._edges(start)}
        frontier = [start]
        for _ in range(depth):
            reached = []
            for node in frontier:
                for other in (end for edge in edges[node] for end in edge if end not in edges):
                    edges[other] = self._edges(other)
                    reached.append(other)
            if not (frontier := reached):
                break
        rendered = []
        for node in sorted(edges, key=_node_id):
            me, links = _node_id(node), sorted((_node_id(o), _node_id(d)) for o, d in edges[node])
            rendered.append({"id": me, **self._data(node),
                             "inEdges": [{"origin": o, "destination": d} for o, d in links if d == me],
                             "outEdges": [{"origin": o, "destination": d} for o, d in links if o == me]})
        return rendered

    def _data(self, node: Node) -> dict[str, Any]:
        kind, key = node
        if kind == "job":
            return {"type": "JOB", "data": _job_json(self._state, self._state.jobs[key])}
        return {"type": "DATASET", "data": _dataset_id(key)}


def _node_id(node: Node) -> str:
    kind, key = node
    if kind == "job":
        return f"job:{key[0]}:{key[1]}"
    namespace, _, name = key.partition("/")
    return f"dataset:{namespace}:{name}"


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
