"""console: p99 page load of the web console's schedules, jobs and runs pages over HTTP, against a
real `sluice standalone --web-port` holding S schedules and R runs (default 100,000 and 1,000,000).

The data is an event log the services recover, not a fake API: S schedules (ScheduleCreated,
ScheduleEnabled from the registry's own decide) and R runs spread over them, each of a job the
matcher fired (its JobTriggered event) and then requested, started and ended (RunRequested,
RunStarted, RunCompleted or RunFailed from the run aggregate's own decide), appended to a SQLite
log in batches, with the outbox checkpoints at the head (what was written had been published).
The launcher recovers the runs, the checker's jobs view the jobs. Generating it is not timed; it is kept under the temp dir, keyed by S, R
and the generator's version, and reused (the standalone's snapshots with it).

Each page is loaded LOADS_PER_URL times at each of three URLs: the first page, a middle page (its
page_token made by the API's own paging code at the middle item), and a search by name (`q`,
which scans up to pages.SCAN_PAGES API pages), once the pages have settled after the start. Figures: p99_ms_<page>_page over the page's loads
(target 300 ms), and median_ms_<page>_page; seconds_to_ready, the standalone's start (its recovery:
of the whole log the first time, from the snapshots it wrote after). Sizes: --schedules (BENCH_SCHEDULES) and
BENCH_CONSOLE_RUNS."""
from __future__ import annotations

import http.client
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from bench import Figure, option, percentile, progress
from sluice.clock import epoch_micros
from sluice.domain import matching, runs, schedules
from sluice.domain.common import ProgramRef
from sluice.domain.jobs import Job, TriggerContext
from sluice.domain.schedules import Schedule, schedule_id_for
from sluice.domain.triggers.specs import TimeTrigger
from sluice.eventlog.codec import encode
from sluice.eventlog.port import Checkpoint, StreamAppend
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.ids import derived_id, run_id_for
from sluice.paging import next_page_token

DESCRIPTION = ("p99 page load of the console's schedules, jobs and runs pages over HTTP at 100,000 schedules and "
               "1,000,000 runs (ms)")
DEFAULT_SCHEDULES = 100_000
DEFAULT_RUNS = 1_000_000
GENERATOR_VERSION = 3
WRITE_BATCH = 20_000
LOADS_PER_URL = 40
TARGET_MS = 300.0
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
APPS = 100
FAILED_EVERY = 20
"""One run in 20 fails."""
READY_TIMEOUT = 1800.0
SETTLED_MS = 3_000.0
SETTLE_TIMEOUT = 1800.0


def run(options: object) -> list[Figure]:
    schedule_count = option(options, "schedules", DEFAULT_SCHEDULES)
    run_count = int(os.environ.get("BENCH_CONSOLE_RUNS") or DEFAULT_RUNS)
    data_dir = _generated(schedule_count, run_count)
    urls = _urls(schedule_count, run_count)
    with _Standalone(data_dir) as server:
        _settle(server, [path for paths in urls.values() for path in paths])
        figures = [Figure("seconds_to_ready", server.ready_seconds, "s")]
        for page, paths in urls.items():
            timings = []
            for path in paths:
                timings += [server.timed_get(path) for _ in range(LOADS_PER_URL)]
            figures.append(Figure(f"p99_ms_{page}_page", percentile(timings, 99), "ms", TARGET_MS))
            figures.append(Figure(f"median_ms_{page}_page", statistics.median(timings), "ms"))
            progress(f"[console]   {page}: " + ", ".join(
                f"{path[:60]} median {statistics.median(timings[i * LOADS_PER_URL:(i + 1) * LOADS_PER_URL]):.0f} ms"
                for i, path in enumerate(paths)))
    return figures


def _settle(server: "_Standalone", paths: list[str]) -> None:
    """Load every URL until a whole round answers each within SETTLED_MS: after its ready line the
    standalone still writes the snapshots of what it recovered and the jobs view catches up, and
    page loads then measure that work, not the pages (a gRPC call past its deadline is a 504)."""
    started = time.perf_counter()
    while time.perf_counter() - started < SETTLE_TIMEOUT:
        slowest = 0.0
        for path in paths:
            began = time.perf_counter()
            try:
                server.get(path)
            except RuntimeError:
                slowest = float("inf")
                continue
            slowest = max(slowest, (time.perf_counter() - began) * 1000)
        if slowest <= SETTLED_MS:
            progress(f"[console] settled {time.perf_counter() - started:.0f} s after ready")
            return
    raise RuntimeError(f"the console's pages did not settle within {SETTLE_TIMEOUT:.0f} s")


# -- the data -------------------------------------------------------------------------------------

def _program(index: int) -> ProgramRef:
    return ProgramRef("bench", f"app{index % APPS:03d}", "report")


def _schedule(index: int) -> Schedule:
    program = _program(index)
    name = f"report-{index:06d}"
    return Schedule(schedule_id_for(program, name), name, program, TimeTrigger("0 0 1 1 *", "UTC"))


def _run_time(index: int) -> datetime:
    return T0 + timedelta(seconds=index)


def _job_id(index: int) -> str:
    return derived_id("bench-job", str(index))


def _generated(schedule_count: int, run_count: int) -> Path:
    data_dir = Path(tempfile.gettempdir()) / f"sluice-bench-console-v{GENERATOR_VERSION}-{schedule_count}-{run_count}"
    if (data_dir / "generated").exists():
        return data_dir
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True)
    progress(f"[console] generating {schedule_count:,} schedules and {run_count:,} runs in {data_dir} "
             "(not timed; kept for later runs)")
    started = time.perf_counter()
    log = SqliteEventLog(data_dir / "events.db")
    try:
        batch: list[StreamAppend] = []
        for index in range(schedule_count):
            schedule = _schedule(index)
            state = schedules.ScheduleState()
            events = schedules.decide(state, schedules.CreateSchedule(schedule), T0)
            state = schedules.evolve(state, events[0])
            events += schedules.decide(state, schedules.EnableSchedule(schedule.id), T0)
            batch.append(_append(schedules.stream_name(schedule.id), events))
            batch = _flush(log, batch)
        for index in range(run_count):
            job = _job(index, schedule_count)
            fired = matching.stream_name(job.schedule_id)
            batch.append(_append(fired, [matching.JobTriggered(job, job.created_at)], index // schedule_count))
            batch.append(_append(runs.stream_name(run_id_for(job.id)), _run_events(index, job)))
            batch = _flush(log, batch)
            if index and index % 100_000 == 0:
                progress(f"[console]   {index:,} runs ({time.perf_counter() - started:.0f} s)")
        _flush(log, batch, force=True)
        head = log.head_position()
        for relay in ("registry", "matcher", "launcher", "datasets"):  # published before: no relay sends it again
            log.save_checkpoint(Checkpoint(f"outbox:{relay}", head))
    finally:
        log.close()
    (data_dir / "generated").write_text(f"{schedule_count} schedules, {run_count} runs\n")
    progress(f"[console] generated in {time.perf_counter() - started:.0f} s")
    return data_dir


def _job(index: int, schedule_count: int) -> Job:
    schedule = _schedule(index % schedule_count)
    at = _run_time(index)
    return Job(_job_id(index), schedule.id, 1, schedule.program, TriggerContext(schedule.id, schedule.name, logical_time=at),
               at, sequence=index // schedule_count + 1, triggered_at=at)


def _run_events(index: int, job: Job) -> list:
    at = job.created_at
    ended = (runs.MarkFailed("exit code 1", retryable=False) if index % FAILED_EVERY == 0
             else runs.MarkCompleted((), ()))
    run, events = None, []
    for command, now in ((runs.RequestRun(job), at), (runs.MarkStarted(10_000 + index % 50_000), at),
                         (ended, at + timedelta(seconds=30 + index % 600))):
        decided = runs.decide(run, command, now)
        for event in decided:
            run = runs.evolve(run, event)
        events += decided
    return events


def _append(stream: str, events: list, first_version: int = 0) -> StreamAppend:
    return StreamAppend(stream, [encode(event, derived_id(stream, str(version))) for version, event in
                                 enumerate(events, first_version)], first_version - 1)


def _flush(log: SqliteEventLog, batch: list[StreamAppend], force: bool = False) -> list[StreamAppend]:
    if batch and (force or len(batch) >= WRITE_BATCH):
        log.append_batch(batch)
        return []
    return batch


# -- the pages ------------------------------------------------------------------------------------

def _urls(schedule_count: int, run_count: int) -> dict[str, list[str]]:
    """Per page: its first page, a middle page (the token the API's paging makes at the middle item),
    and a search: schedules and jobs by a schedule's name (few match: the scan's worst case), runs by an
    app's name (their program's; one run in APPS)."""
    middle = _schedule(schedule_count // 2)
    schedule_key = (middle.program.namespace, middle.program.app, middle.name)
    run_index = run_count // 2
    run_key = (epoch_micros(_run_time(run_index)), run_id_for(_job_id(run_index)))
    job_key = (epoch_micros(_run_time(run_index)), _job_id(run_index))
    searched = _schedule(random.Random(schedule_count).randrange(schedule_count)).name
    return {
        "schedules": ["/schedules", "/schedules?page_token=" + next_page_token("ListSchedules", schedule_key),
                      f"/schedules?q={searched}"],
        "jobs": ["/jobs?all=1", "/jobs?all=1&page_token=" + next_page_token("Jobs.ListJobs", job_key),
                 f"/jobs?all=1&q={searched}"],
        "runs": ["/runs", "/runs?page_token=" + next_page_token("Runs.ListRuns", run_key),
                 f"/runs?q={middle.program.app}"],
    }


class _Standalone:
    """`sluice standalone --web-port 0` on the generated data dir, stopped by its pid."""

    def __init__(self, data_dir: Path) -> None:
        self._data_dir = data_dir
        self.process: subprocess.Popen | None = None
        self._connection: http.client.HTTPConnection | None = None
        self.ready_seconds = 0.0
        """From the start to the ready line: the recovery, from the snapshots once a run has written them."""

    def __enter__(self) -> "_Standalone":
        env = {key: value for key, value in os.environ.items() if not key.startswith("SLUICE_")}
        progress("[console] starting the standalone (recovery of the generated log) ...")
        started = time.perf_counter()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "sluice_services.cli", "standalone", "--data-dir", str(self._data_dir),
             "--port", "0", "--web-port", "0", "--apps-dir", str(self._data_dir / "apps")],
            stdout=subprocess.PIPE, stderr=open(self._data_dir / "standalone.stderr", "ab"), text=True, env=env)
        line = self.process.stdout.readline()
        if " web on " not in line:
            self.__exit__()
            raise RuntimeError(f"standalone did not start: {line!r}; see {self._data_dir / 'standalone.stderr'}")
        host, port = line.split(" web on ")[1].split()[0].rsplit(":", 1)
        self._connection = http.client.HTTPConnection(host, int(port), timeout=READY_TIMEOUT)
        self.ready_seconds = time.perf_counter() - started
        progress(f"[console] ready in {self.ready_seconds:.0f} s")
        return self

    def get(self, path: str) -> bytes:
        assert self._connection is not None
        self._connection.request("GET", path)
        response = self._connection.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"GET {path}: HTTP {response.status}: {body[:300]!r}")
        return body

    def timed_get(self, path: str) -> float:
        started = time.perf_counter()
        self.get(path)
        return (time.perf_counter() - started) * 1000

    def __exit__(self, *exc: object) -> None:
        if self._connection is not None:
            self._connection.close()
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait()
        if self.process is not None:
            self.process.stdout.close()

