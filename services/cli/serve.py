"""`sluice standalone` and `sluice serve SERVICE` (also `python -m sluice_services.<name>`).

Options left out on the command line come from the environment (SLUICE_<OPTION>), then from the
--config file, then from the defaults (see sluice_services.config)."""
from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from sluice.domain.errors import InvalidArgument
from sluice.eventlog.batched import MalformedBatch
from sluice.eventlog.codec import UndecodableEvent
from sluice.eventlog.port import EventLogNotMigrated
from sluice.runtime.logs import configure_logging

if TYPE_CHECKING:
    from sluice_services.composition import Settings


def add_server_options(parser: argparse.ArgumentParser) -> None:
    """Every default is None: "not given", so the environment and the --config file can fill it in."""
    option = parser.add_argument
    option("--config", type=Path, metavar="FILE",
           help="TOML file: [sluice] options and [services.<name>] overrides (env SLUICE_CONFIG)")
    option("--data-dir", type=Path, help="event log, bus and data (env SLUICE_DATA_DIR; default .sluice)")
    option("--host", help="address to bind, gRPC and metrics (env SLUICE_HOST; default 127.0.0.1)")
    option("--port", type=int, help="gRPC port; 0 picks a free one (env SLUICE_PORT; default 50051)")
    option("--metrics-port", type=int, metavar="PORT",
           help="serve GET /metrics and /healthz over HTTP on this port; 0 picks a free one "
                "(env SLUICE_METRICS_PORT; default: no metrics endpoint)")
    option("--grpc-token", metavar="TOKEN",
           help="bearer token every gRPC call must carry, health checks aside; prefer the environment, "
                "a command line is visible to every user of the machine (env SLUICE_GRPC_TOKEN; default: none)")
    option("--tls-cert", type=Path, metavar="PEM",
           help="serve gRPC over TLS with this certificate chain, with --tls-key (env SLUICE_TLS_CERT; default: plaintext)")
    option("--tls-key", type=Path, metavar="PEM", help="the certificate's private key (env SLUICE_TLS_KEY)")
    option("--tls-client-ca", type=Path, metavar="PEM",
           help="mutual TLS: accept only callers with a certificate this CA signed (env SLUICE_TLS_CLIENT_CA; "
                "default: no client certificate asked for)")
    option("--auth-policy", type=Path, metavar="FILE",
           help="authorization: TOML file of principals (hashed tokens, mTLS subjects) and their roles per "
                "namespace; see README 'Authorization' (env SLUICE_AUTH_POLICY; default: none)")
    option("--insecure", action="store_true", default=None,
           help="serve beyond loopback (--host) without any authentication, which is otherwise refused "
                "(env SLUICE_INSECURE=1)")
    option("--spark-master", help="Spark master URL for programs (env SLUICE_SPARK_MASTER; default local[*])")
    option("--spark-submit", metavar="PATH",
           help="the spark-submit command that starts programs (env SLUICE_SPARK_SUBMIT; default the venv's)")
    option("--spark-driver-host", metavar="HOST",
           help="the address executors reach a program's driver at (env SLUICE_SPARK_DRIVER_HOST; default --host, "
                "or Spark's choice when --host is a wildcard)")
    option("--spark-driver-bind-address", metavar="ADDRESS",
           help="where a program's driver listens (env SLUICE_SPARK_DRIVER_BIND_ADDRESS; default the driver host)")
    option("--spark-executor-memory", metavar="SIZE", help="e.g. 2g (env SLUICE_SPARK_EXECUTOR_MEMORY; default Spark's)")
    option("--spark-executor-cores", type=int, metavar="N", help="(env SLUICE_SPARK_EXECUTOR_CORES; default Spark's)")
    option("--spark-packages", action="append", metavar="GROUP:ARTIFACT:VERSION",
           help="a Maven package for programs (repeat; env SLUICE_SPARK_PACKAGES, comma-separated)")
    option("--spark-conf", action="append", metavar="KEY=VALUE",
           help="any other spark.* setting of programs, e.g. spark.ui.enabled=true (repeat; env SLUICE_SPARK_CONF, "
                "comma-separated: a value with a comma goes in the configuration file's spark_conf array)")
    option("--apps-dir", type=Path,
           help="where programs live: <apps-dir>/<app>/<program>.py (env SLUICE_APPS_DIR; default examples/)")
    option("--max-parallel-runs", type=int, help="programs running at once (env SLUICE_MAX_PARALLEL_RUNS; default 2)")
    option("--event-log", metavar="URL",
           help="sqlite:///path, postgresql://... or kurrentdb://host:2113?tls=false (env SLUICE_EVENT_LOG; "
                "default <data-dir>/events.db)")
    option("--bus", metavar="URL",
           help="inprocess:///path or kafka://host:port (env SLUICE_BUS; default <data-dir>/bus.db)")
    option("--migrate", action=argparse.BooleanOptionalAction, default=None,
           help="create or update the event log's schema at start (PostgreSQL), as `sluice migrate` does; "
                "--no-migrate: the server needs no DDL rights and stops (exit 2) on a log not migrated "
                "(env SLUICE_MIGRATE; default on)")
    option("--log-level", help="DEBUG, INFO, WARNING, ERROR or CRITICAL (env SLUICE_LOG_LEVEL; default WARNING); "
                               "at INFO every job transition, launch, retry and run end is a line")
    option("--log-format", help="text or json: one JSON object per line with schedule, job and run ids "
                                "(env SLUICE_LOG_FORMAT; default text)")
    option("--load-limit", type=int, metavar="RUNS",
           help="checker: at this many runs going, normal-priority jobs wait (env SLUICE_LOAD_LIMIT; default none)")
    option("--load-hard-limit", type=int, metavar="RUNS",
           help="checker: the limit for every job, high priority too (env SLUICE_LOAD_HARD_LIMIT; default none)")
    option("--lineage-port", type=int, metavar="PORT",
           help="lineage: serve POST /api/v1/lineage and Marquez's read API over HTTP on this port; 0 picks a "
                "free one (env SLUICE_LINEAGE_PORT; default: off)")
    option("--lineage-token", metavar="TOKEN",
           help="lineage: bearer token of the lineage HTTP API, an operator of every namespace there: posting "
                "events and reading (env SLUICE_LINEAGE_TOKEN; default: none)")
    option("--openlineage-url", metavar="URL",
           help="lineage: also send every lineage event of Sluice's runs to this OpenLineage backend, e.g. "
                "http://marquez:5000 (env SLUICE_OPENLINEAGE_URL; default: none)")
    option("--openlineage-api-key", metavar="KEY",
           help="lineage: API key for that backend (env SLUICE_OPENLINEAGE_API_KEY; default: none)")
    option("--program-env", action="append", metavar="NAME",
           help="launcher: an environment variable programs get beyond the allowlist (PATH, HOME, LANG, LC_*, TZ, "
                "TMPDIR, JAVA_HOME, SPARK_*, PYSPARK_*, PYTHONPATH, ...); repeat it; NAME* allows a prefix "
                "(env SLUICE_PROGRAM_ENV, comma-separated)")
    option("--program-user", metavar="USER",
           help="launcher: run programs as this user (name or uid; the launcher must run as root), which gets "
                "its attempt's directory and nothing of the launcher's: not its data dir's files, credentials "
                "key or processes (env SLUICE_PROGRAM_USER; default: the launcher's own user)")
    option("--run-credential-secret", metavar="KEY",
           help="datasets: the key per-run program credentials are signed with; datasets services that do not "
                "share a data dir must share it; prefer the environment (env SLUICE_RUN_CREDENTIAL_SECRET; default: "
                "<data-dir>/run-credentials.key, made once)")
    option("--datasets-address", metavar="HOST:PORT",
           help="launcher: the datasets service, which publishes runs' outputs and serves programs their "
                "partitions; required by `serve launcher`; checker: where partition backfills list partitions "
                "(env SLUICE_DATASETS_ADDRESS; standalone: its own)")
    option("--datasets-token", metavar="TOKEN",
           help="launcher: its bearer token at the datasets service, which needs runs.launch (admin) on every "
                "namespace; prefer the environment (env SLUICE_DATASETS_TOKEN; default: --grpc-token)")
    option("--high-priority", type=int, metavar="P",
           help="checker: jobs of at least this priority pass the load limit (env SLUICE_HIGH_PRIORITY; default 1)")
    option("--jobs-history", type=int, metavar="JOBS",
           help="checker: finished jobs listed per schedule, the newest; the event log keeps every one "
                "(env SLUICE_JOBS_HISTORY; default 1000)")
    option("--web-port", type=int, metavar="PORT",
           help="standalone and serve web: the web console (HTTP) on this port; 0 picks a free one "
                "(env SLUICE_WEB_PORT; default: no console; serve web: 8080)")
    option("--lease-seconds", type=int, metavar="SECONDS",
           help="launcher: how long its lease on the runs lasts unless renewed (every third of it); another "
                "launcher on the same event log takes them over only after it expired (env SLUICE_LEASE_SECONDS; "
                "default 30)")
    option("--run-dir-retention", metavar="DURATION",
           help="launcher: how long an ended run's directory (context, driver logs of every attempt) is kept "
                "before it is deleted: 7d, 12h, 30m (env SLUICE_RUN_DIR_RETENTION; default 7d)")
    option("--runs-history", type=int, metavar="RUNS",
           help="launcher: ended runs kept in memory and listed per schedule, the newest; older ones are still "
                "found by id (GetRun) in the event log (env SLUICE_RUNS_HISTORY; default 1000)")


def run_server(args: argparse.Namespace, names: tuple[str, ...]) -> int:
    from sluice_services.config import ConfigError, exposure_error, load_settings

    label = "standalone" if len(names) > 1 else names[0]
    try:
        settings = load_settings(args, label)
    except ConfigError as error:
        print(f"sluice: error: {error}", file=sys.stderr)
        return 2
    if (exposed := exposure_error(settings)) is not None:
        print(f"sluice: error: {exposed}", file=sys.stderr)
        return 2
    from sluice_services.dir_lock import DataDirLocked, lock_services

    try:  # held until the process ends: a second one of these services on this data dir refuses to start
        locks = lock_services(settings.data_dir, names)
    except DataDirLocked as locked:
        print(f"sluice: error: {locked}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"sluice: error: {error}", file=sys.stderr)
        return 1
    configure_logging(settings.log_level, settings.log_format)
    try:
        _profiled(label, lambda: asyncio.run(_serve(settings, names, label)))
    except EventLogNotMigrated as error:
        print(f"sluice: error: {error}", file=sys.stderr)
        return 2
    except InvalidArgument as error:
        print(f"sluice: error: {error}", file=sys.stderr)
        return 2
    except UndecodableEvent as error:  # starting again would meet it again: one line, not a traceback per restart
        print(f"sluice: error: {UndecodableEvent.WHAT}: {error}", file=sys.stderr)
        return 1
    except MalformedBatch as error:  # names its record, stream and position
        print(f"sluice: error: the event log holds an unreadable record: {error}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"sluice: error: {error}", file=sys.stderr)
        return 1
    finally:
        for lock in locks:
            lock.release()
    return 0


def _profiled(label: str, run: Callable[[], None]) -> None:
    """`run()`, under cProfile when SLUICE_PROFILE_DIR is set (benchmarks): the stats go to <dir>/<label>.pstats
    when the server stops. The directory is made (or refused, OSError) before the server starts, not found
    missing once it stops. SLUICE_PROFILE_CLOCK=cpu times the main thread's CPU (time.thread_time) instead of
    wall time: on a loaded machine wall time counts the waits for a core, and the loop's blocking calls show
    only in wall time."""
    directory = os.environ.get("SLUICE_PROFILE_DIR")
    if not directory:
        return run()
    clock = os.environ.get("SLUICE_PROFILE_CLOCK", "wall")
    if clock not in ("wall", "cpu"):
        raise InvalidArgument("SLUICE_PROFILE_CLOCK", f"must be wall or cpu, got {clock!r}")
    os.makedirs(directory, exist_ok=True)
    import cProfile

    profiler = cProfile.Profile(time.thread_time) if clock == "cpu" else cProfile.Profile()
    try:
        profiler.runcall(run)
    finally:
        profiler.dump_stats(os.path.join(directory, f"{label}.pstats"))


async def _serve(settings: "Settings", names: tuple[str, ...], label: str) -> None:
    from sluice_services.embedded import run_embedded

    metrics_at: list[str] = []

    def metrics_ready(port: int) -> None:
        metrics_at.append(f" metrics on {settings.host}:{port}")

    def ready(port: int) -> None:
        print(f"sluice {label} ready on {settings.host}:{port}{''.join(metrics_at)} (data in {settings.data_dir})",
              flush=True)

    console = None
    if settings.web_port is not None and len(names) > 1:
        from sluice_services.web.server import standalone_console

        console, console_reads = await standalone_console(settings)
        metrics_at.append(f" web on {settings.host}:{console.port}")
        ready = _both(console_reads, ready)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await run_embedded(settings, names, on_ready=ready, stop=stop, on_metrics_ready=metrics_ready)
    finally:
        if console is not None:
            await console.close()


def _both(first, then):
    return lambda port: (first(port), then(port))


def serve_main(name: str) -> None:
    parser = argparse.ArgumentParser(prog=f"python -m sluice_services.{name}", description=f"Run the {name} service.")
    add_server_options(parser)
    sys.exit(run_server(parser.parse_args(), (name,)))
