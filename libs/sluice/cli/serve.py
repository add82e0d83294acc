"""`sluice standalone` and `sluice serve SERVICE` (also `python -m sluice_services.<name>`)."""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

from sluice.runtime.errors import InvalidArgument


def add_server_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, default=Path(".sluice"), help="event log, bus and data (default .sluice)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=50051, help="gRPC port; 0 picks a free one (default 50051)")
    parser.add_argument("--spark-master", default="local[*]", help="Spark master URL for programs (default local[*])")
    parser.add_argument("--apps-dir", type=Path, default=None, help="where programs live: <apps-dir>/<app>/<program>.py")
    parser.add_argument("--max-parallel-runs", type=int, default=2, help="programs running at once (default 2)")
    parser.add_argument("--event-log", default=os.environ.get("SLUICE_EVENT_LOG", ""), metavar="URL",
                        help="sqlite:///path or postgresql://... (env SLUICE_EVENT_LOG; default <data-dir>/events.db)")
    parser.add_argument("--bus", default=os.environ.get("SLUICE_BUS", ""), metavar="URL",
                        help="inprocess:///path or kafka://host:port (env SLUICE_BUS; default <data-dir>/bus.db)")
    parser.add_argument("--log-level", default="WARNING")


def run_server(args: argparse.Namespace, names: tuple[str, ...]) -> int:
    from sluice_services.composition import DEFAULT_APPS_DIR, Settings
    from sluice_services.embedded import run_embedded
    from sluice_services.launcher.programs import SparkConfig

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.max_parallel_runs < 1:
        print("sluice: error: --max-parallel-runs must be at least 1", file=sys.stderr)
        return 2
    settings = Settings(data_dir=args.data_dir, host=args.host, port=args.port,
                        spark=SparkConfig(master=args.spark_master), apps_dir=args.apps_dir or DEFAULT_APPS_DIR,
                        max_parallel_runs=args.max_parallel_runs, event_log=args.event_log, bus=args.bus)
    label = "standalone" if len(names) > 1 else names[0]

    def ready(port: int) -> None:
        print(f"sluice {label} ready on {settings.host}:{port} (data in {settings.data_dir})", flush=True)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await run_embedded(settings, names, on_ready=ready, stop=stop)

    try:
        asyncio.run(main())
    except InvalidArgument as error:
        print(f"sluice: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"sluice: error: {error}", file=sys.stderr)
        return 1
    return 0


def serve_main(name: str) -> None:
    parser = argparse.ArgumentParser(prog=f"python -m sluice_services.{name}", description=f"Run the {name} service.")
    add_server_options(parser)
    sys.exit(run_server(parser.parse_args(), (name,)))
