"""`python -m sluice_services.ingest --broker kafka://HOST:PORT --server HOST:PORT --mapping FILE`

Reads S3-style object-created events from a Kafka topic and publishes Sluice partition notifications
through the Notifications gRPC API (the producer's token: SLUICE_TOKEN). Prints
`sluice ingest ready (TOPIC -> SERVER)` once the worker runs; SIGTERM / SIGINT stop it.
A configuration error ends it with exit code 2 and one line.
"""
from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import tomllib
from pathlib import Path

from sluice.bus.kafka_security import parse_kafka_url
from sluice.bus.topics import DEAD_LETTER
from sluice.client import SluiceClient, default_server
from sluice_services.ingest.bridge import Backoff
from sluice_services.ingest.app import DEFAULT_APP_ID, DEFAULT_TOPIC, IngestSettings, build_app, grpc_publisher
from sluice_services.ingest.mapping import MappingError, parse_route_option, parse_routes


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sluice-ingest", description=__doc__.split("\n\n")[1].replace("\n", " "))
    parser.add_argument("--broker", default=os.environ.get("SLUICE_BUS", ""),
                        help="kafka://HOST:PORT[?security options] (default SLUICE_BUS)")
    parser.add_argument("--topic", default=DEFAULT_TOPIC, help=f"the object-event topic (default {DEFAULT_TOPIC})")
    parser.add_argument("--dead-letter-topic", default=DEAD_LETTER, help=f"default {DEAD_LETTER}")
    parser.add_argument("--app-id", default=DEFAULT_APP_ID, help=f"Faust app id = consumer group (default {DEFAULT_APP_ID})")
    parser.add_argument("--server", default=default_server(), help="Sluice's gRPC address (default SLUICE_SERVER)")
    parser.add_argument("--mapping", type=Path, help="TOML file of [[route]] tables")
    parser.add_argument("--route", action="append", default=[],
                        help="a route as NAME=VALUE words: bucket= prefix= pattern= dataset=NS.DATASET (repeatable)")
    parser.add_argument("--tls", action="store_true", help="speak TLS to the server (system CAs)")
    parser.add_argument("--tls-ca", help="PEM file of the server's CA (default SLUICE_TLS_CA)")
    parser.add_argument("--client-cert", help="PEM client certificate (mutual TLS)")
    parser.add_argument("--client-key", help="PEM key of --client-cert")
    parser.add_argument("--max-backoff", type=float, default=30.0,
                        help="longest wait in seconds between retries while the server or broker is unavailable (default 30)")
    parser.add_argument("--log-level", default="info")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    try:
        routes = _routes(args)
        if not 0.1 <= args.max_backoff <= 3600:
            raise ValueError(f"--max-backoff: must be between 0.1 and 3600 seconds, got {args.max_backoff}")
        if not args.broker:
            raise ValueError("--broker (or SLUICE_BUS) is required")
        parse_kafka_url(args.broker)
    except (MappingError, ValueError, OSError, tomllib.TOMLDecodeError) as error:
        print(f"sluice-ingest: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    datadir = tempfile.mkdtemp(prefix="sluice-ingest-")  # Faust wants one; nothing is kept in it
    client = SluiceClient(args.server, token=None, tls=args.tls, tls_ca=args.tls_ca,
                          client_cert=args.client_cert, client_key=args.client_key)
    settings = IngestSettings(args.broker, routes, topic=args.topic, dead_letter_topic=args.dead_letter_topic,
                              app_id=args.app_id, datadir=datadir,
                              backoff=Backoff(first=min(0.2, args.max_backoff), cap=args.max_backoff))
    app, _ = build_app(settings, grpc_publisher(client))

    @app.task
    async def announce_ready() -> None:
        print(f"sluice ingest ready ({args.topic} -> {args.server})", flush=True)

    worker = app.Worker(loglevel=args.log_level.upper(), quiet=True, redirect_stdouts=False)
    logging.getLogger("sluice").setLevel(args.log_level.upper())
    try:
        worker.execute_from_commandline()
    finally:
        client.close()
        shutil.rmtree(datadir, ignore_errors=True)


def _routes(args: argparse.Namespace):
    routes = []
    if args.mapping:
        with open(args.mapping, "rb") as file:
            try:
                routes.extend(parse_routes(tomllib.load(file)))
            except MappingError as error:
                raise MappingError(f"{args.mapping}: {error}") from None
    routes.extend(parse_route_option(text) for text in args.route)
    if not routes:
        raise MappingError("no routes: give --mapping FILE or --route")
    return tuple(routes)


if __name__ == "__main__":
    main()
