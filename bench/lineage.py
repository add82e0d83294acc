"""lineage: the lineage service on a graph of J jobs and R runs, on a SQLite file log.

Setup (once per process, reused by the harness's repeated runs): R runs with a START and a
COMPLETE event each are appended to the log as the service records them (the same stream names,
event ids and canonical JSON), in batches, bypassing HTTP. The graph: J/10 schedules, each a
root job with 3 program jobs, each with 2 Spark jobs (the parent run facet at each level); a
program reads dataset k and writes k+1, its Spark stages go through a temporary dataset, and
ten schedules chain into one pipeline, so a depth-20 query covers ~40 to ~80 nodes.

Figures (each run):
- rebuild_events_per_s: LineageService.rebuild(): the whole log folded, then a snapshot saved.
- restart_from_snapshot_s: LineageService.recover() of another service on that log, as a server
  starting up: the snapshot loaded, the log after it folded.
- memory_per_run: resident memory the rebuilt projection takes, per run (bytes); measured on
  the process's first rebuild only, since later ones reuse the memory the previous one freed.
- http_ingest_events_per_s: POST /api/v1/lineage by the openlineage-python client's HTTP
  transport (one event per request, sequential), onto the big graph.
- service_ingest_events_per_s: LineageService.handle_message, the bus consumer's path (decode,
  validate, one append per event, projection update), onto the big graph.
- lineage_query_p50_ms / lineage_query_p99_ms: GET /api/v1/lineage?nodeId=job:...&depth=20 for
  random jobs over keep-alive HTTP (target p99 < 100 ms).

Sizes: BENCH_LINEAGE_JOBS (default 10,000), BENCH_LINEAGE_RUNS (1,000,000),
BENCH_LINEAGE_QUERIES (1,000), BENCH_LINEAGE_POSTS (2,000 over HTTP, ten times that through
the service).
"""
from __future__ import annotations

import asyncio
import gc
import itertools
import json
import random
import statistics
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import aiohttp
from openlineage.client import OpenLineageClient
from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.facet_v2 import parent_run
from openlineage.client.transport.http import HttpConfig, HttpTransport

from bench import Figure, option, progress
from sluice.clock import SystemClock
from sluice.domain.lineage import parse_run_event
from sluice.eventlog.port import ANY_VERSION, StreamAppend
from sluice.eventlog.sqlite import SqliteEventLog
from sluice_services.lineage import http_api
from sluice_services.lineage.service import LineageService, recorded_event, stream_name

DESCRIPTION = "lineage service on 10k jobs / 1M runs: rebuild events/s, ingest events/s (HTTP, bus path), depth-20 graph p50/p99"
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
NS = "bench"
PRODUCER = "https://github.com/sluice/sluice/bench"
STEPS, STAGES, CHAIN = 3, 2, 10          # programs per schedule, Spark jobs per program, schedules per pipeline
_BATCH = 5000
_setup: dict[tuple[int, int], Path] = {}
_memory: dict[tuple[int, int], float] = {}   # measured on the first rebuild: later ones reuse freed memory
_workdir = tempfile.TemporaryDirectory(prefix="sluice-bench-lineage-")
_fresh_ticks = itertools.count(1_000_000, 100_000)     # far past the setup's ticks, apart per measurement


def run(options: object) -> list[Figure]:
    jobs = option(options, "lineage_jobs", 10_000)
    runs = option(options, "lineage_runs", 1_000_000)
    queries = option(options, "lineage_queries", 1_000)
    posts = option(options, "lineage_posts", 2_000)
    rng = random.Random(getattr(options, "seed", 42))
    schedules = max(1, jobs // (1 + STEPS + STEPS * STAGES))
    ticks = max(1, runs // (schedules * (1 + STEPS + STEPS * STAGES)))
    path = _setup.get((jobs, runs)) or _build_log(schedules, ticks)
    _setup[(jobs, runs)] = path

    log = SqliteEventLog(path)
    try:
        gc.collect()
        rss_before = _rss()
        service = LineageService(log, SystemClock())
        started = time.perf_counter()
        service.rebuild()
        rebuild = time.perf_counter() - started
        gc.collect()
        events, run_count = log.head_position(), len(service.state.runs)
        per_run = _memory.setdefault((jobs, runs), (_rss() - rss_before) / run_count)
        progress(f"[lineage] rebuilt {events} events into {len(service.state.jobs)} jobs, {run_count} runs "
                 f"in {rebuild:.1f} s; {per_run:.0f} B resident per run")
        restarted = LineageService(log, SystemClock())
        started = time.perf_counter()
        restarted.recover()
        restart = time.perf_counter() - started
        progress(f"[lineage] a restart from the snapshot took {restart:.1f} s")
        del restarted
        http_rate, service_rate, latencies = asyncio.run(_serve_and_measure(service, schedules, queries, posts, rng))
    finally:
        log.close()
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return [
        Figure("rebuild_events_per_s", events / rebuild, "events/s"),
        Figure("restart_from_snapshot_s", restart, "s"),
        Figure("memory_per_run", per_run, "bytes"),
        Figure("http_ingest_events_per_s", http_rate, "events/s"),
        Figure("service_ingest_events_per_s", service_rate, "events/s"),
        Figure("lineage_query_p50_ms", statistics.median(latencies), "ms"),
        Figure("lineage_query_p99_ms", p99, "ms", 100),
    ]


async def _serve_and_measure(service: LineageService, schedules: int, queries: int, posts: int,
                             rng: random.Random) -> tuple[float, float, list[float]]:
    runner = await http_api.serve(service, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{http_api.bound_port(runner)}"
    try:
        client = OpenLineageClient(transport=HttpTransport(HttpConfig(url=url, timeout=30)))
        first_tick = next(_fresh_ticks)                  # runs no earlier measurement posted: no duplicates
        fresh = [_client_event(*e) for e in _tick_events(rng.randrange(schedules), first_tick, posts)]
        started = time.perf_counter()
        await asyncio.to_thread(lambda: [client.emit(e) for e in fresh])
        http_rate = len(fresh) / (time.perf_counter() - started)
        progress(f"[lineage] {len(fresh)} events over HTTP at {http_rate:.0f}/s")

        values = [json.dumps(_event(*e)).encode() for e in
                  _tick_events(rng.randrange(schedules), next(_fresh_ticks), posts * 10)]
        started = time.perf_counter()
        for value in values:
            service.handle_message(value)
        service_rate = len(values) / (time.perf_counter() - started)
        progress(f"[lineage] {len(values)} events through handle_message at {service_rate:.0f}/s")

        latencies = []
        async with aiohttp.ClientSession() as session:
            for _ in range(queries):
                node = f"job:{NS}:{_job_name(rng.randrange(schedules), rng.randrange(STEPS), rng.randrange(STAGES))}"
                started = time.perf_counter()
                async with session.get(f"{url}/api/v1/lineage", params={"nodeId": node, "depth": "20"}) as response:
                    body = await response.json()
                latencies.append((time.perf_counter() - started) * 1000)
                if response.status != 200:
                    raise RuntimeError(f"GET lineage {node}: {response.status} {body}")
        progress(f"[lineage] {queries} depth-20 queries, last one {len(body['graph'])} nodes")
        return http_rate, service_rate, latencies
    finally:
        await runner.cleanup()


def _build_log(schedules: int, ticks: int) -> Path:
    path = Path(_workdir.name) / f"lineage-{schedules}-{ticks}.db"
    log = SqliteEventLog(path)
    started, count, batch = time.perf_counter(), 0, []
    try:
        for tick in range(ticks):
            for schedule in range(schedules):
                for obj in (_event(*e) for e in _tick_events(schedule, tick)):
                    record = parse_run_event(obj)
                    batch.append(StreamAppend(stream_name(record.run_id), [recorded_event(obj, record, T0)], ANY_VERSION))
                if len(batch) >= _BATCH:
                    log.append_batch(batch)
                    count += len(batch)
                    batch = []
            progress(f"[lineage] setup: tick {tick + 1}/{ticks}, {count} events appended") if tick % 10 == 9 else None
        log.append_batch(batch)
    finally:
        log.close()
    progress(f"[lineage] setup: {count + len(batch)} events in {time.perf_counter() - started:.0f} s")
    return path


def _job_name(schedule: int, step: int | None = None, stage: int | None = None) -> str:
    name = f"schedule_{schedule:05d}"
    if step is not None:
        name += f".program_{step}"
    if stage is not None:
        name += f".spark_{stage}"
    return name


def _dataset(schedule: int, step: int) -> str:
    """Program `step` reads dataset `step` and writes `step + 1`; a pipeline's schedules chain."""
    pipeline, position = divmod(schedule, CHAIN)
    return f"pipeline_{pipeline}/d_{position * STEPS + step}"


def _tick_events(schedule: int, tick: int, limit: int | None = None):
    """(run id, type, time, job name, parent, inputs, outputs) of one tick of a schedule: its run,
    its program runs, their Spark runs; START and COMPLETE each. With a limit, as many ticks as needed."""
    produced, tick_no = 0, tick
    while True:
        at = T0 + timedelta(hours=tick_no)
        root = str(uuid.UUID(int=(schedule << 64) | (tick_no << 16)))
        items = [(root, at, _job_name(schedule), None, (), ())]
        for step in range(STEPS):
            program = str(uuid.UUID(int=(schedule << 64) | (tick_no << 16) | (step + 1) << 8))
            items.append((program, at + timedelta(seconds=1), f"program_{step}", (root, _job_name(schedule)),
                          (_dataset(schedule, step),), (_dataset(schedule, step + 1),)))
            for stage in range(STAGES):
                spark = str(uuid.UUID(int=(schedule << 64) | (tick_no << 16) | (step + 1) << 8 | stage + 1))
                temporary = f"tmp/{_job_name(schedule, step)}"
                items.append((spark, at + timedelta(seconds=2), f"spark_{stage}", (program, f"program_{step}"),
                              (_dataset(schedule, step),) if stage == 0 else (temporary,),
                              (temporary,) if stage == 0 else (_dataset(schedule, step + 1),)))
        for run_id, start, name, parent, inputs, outputs in items:
            for event_type, when in (("START", start), ("COMPLETE", start + timedelta(minutes=5))):
                yield run_id, event_type, when, name, parent, inputs, outputs
                produced += 1
                if limit is not None and produced >= limit:
                    return
        if limit is None:
            return
        tick_no += 1


def _event(run_id, event_type, when, name, parent, inputs, outputs) -> dict:
    """An OpenLineage 2-0-2 run event as the client serializes one."""
    facets = {}
    if parent:
        facets["parent"] = {"_producer": PRODUCER, "_schemaURL": _PARENT_SCHEMA,
                            "run": {"runId": parent[0]}, "job": {"namespace": NS, "name": parent[1]}}
    return {"eventType": event_type, "eventTime": when.isoformat(), "producer": PRODUCER, "schemaURL": _SCHEMA,
            "run": {"runId": run_id, "facets": facets}, "job": {"namespace": NS, "name": name, "facets": {}},
            "inputs": [{"namespace": NS, "name": d, "facets": {}} for d in inputs],
            "outputs": [{"namespace": NS, "name": d, "facets": {}} for d in outputs]}


def _client_event(run_id, event_type, when, name, parent, inputs, outputs) -> RunEvent:
    """The same event built with the openlineage-python client's model."""
    facets = {}
    if parent:
        facets["parent"] = parent_run.ParentRunFacet(run=parent_run.Run(runId=parent[0]),
                                                     job=parent_run.Job(namespace=NS, name=parent[1]))
    return RunEvent(eventType=RunState[event_type], eventTime=when.isoformat(), producer=PRODUCER,
                    run=Run(runId=run_id, facets=facets), job=Job(namespace=NS, name=name),
                    inputs=[InputDataset(namespace=NS, name=d) for d in inputs],
                    outputs=[OutputDataset(namespace=NS, name=d) for d in outputs])


_SCHEMA = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"
_PARENT_SCHEMA = "https://openlineage.io/spec/facets/1-1-0/ParentRunFacet.json#/$defs/ParentRunFacet"


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096
