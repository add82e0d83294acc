"""The `sluice` command line's client commands (they talk to a running server over gRPC).

The server-side commands (`standalone`, `serve`, `log`, `dlq`, `replay`, `rebuild`) need the services
and live with them: sluice_services.cli builds on `build_parser` and is the `sluice` console script."""
from __future__ import annotations

import argparse
import json
import sys
import uuid
from typing import Callable

import grpc

from sluice.cli import alerts as alerts_cli
from sluice.cli import auth as auth_cli
from sluice.cli import datasets as datasets_cli
from sluice.cli import render
from sluice.cli import schedules as schedules_cli
from sluice.cli import work as work_cli
from sluice.cli.output import Refused, UsageError, jsonable, pairs, print_json
from sluice.client import SluiceClient, default_server
from sluice.domain.common import PartitionRef

AddCommands = Callable[[argparse._SubParsersAction], None]
"""Adds subcommands to the `sluice` parser's COMMAND list."""


def main(argv: list[str] | None = None) -> int:
    """The client commands alone; `sluice` itself is sluice_services.cli.main."""
    return run(build_parser(), argv)


def run(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> int:
    """Parse and run a command: one with `server_mode` set runs as `handler(args)`; any other gets a
    client connected to --server, as `handler(client, args)`. A group without its ACTION prints the
    group's help on stderr, exit 2."""
    args = parser.parse_args(argv)
    if not hasattr(args, "handler"):
        group = getattr(args, "group_parser", None) or parser
        group.print_help(sys.stderr)
        return 2
    if getattr(args, "server_mode", False):
        return args.handler(args)
    try:
        client = SluiceClient(args.server, token=args.token, tls=args.tls, tls_ca=args.tls_ca,
                              client_cert=args.client_cert, client_key=args.client_key)
    except OSError as error:
        print(f"sluice: error: cannot read {error.filename}: {error.strerror}", file=sys.stderr)
        return 2
    try:
        with client:
            return args.handler(client, args) or 0
    except UsageError as error:
        print(f"sluice: error: {_one_line(str(error))}", file=sys.stderr)
        return 2
    except Refused as error:
        print(f"sluice: error: {_one_line(str(error))}", file=sys.stderr)
        for line in error.details:
            print(line, file=sys.stderr)
        return 1
    except grpc.RpcError as error:
        if error.code() == grpc.StatusCode.UNAVAILABLE:
            print(f"sluice: error: cannot reach Sluice at {args.server} (is `sluice standalone` running?)", file=sys.stderr)
            return 3
        print(f"sluice: error: {error.code().name}: {_one_line(error.details() or '')}", file=sys.stderr)
        return 1


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _global_options(parser: argparse.ArgumentParser, top: bool) -> None:
    """The options every command takes, before or after its name. Below the top they default to
    SUPPRESS, so a subcommand sets one only when it is given there."""
    def default(value):
        return value if top else argparse.SUPPRESS

    group = parser if top else parser.add_argument_group("global options (also before the command)")
    group.add_argument("--server", default=default(default_server()),
                       help="gRPC address (env SLUICE_SERVER; default %s)" % default_server())
    group.add_argument("--token", default=default(None),
                       help="bearer token of a server started with --grpc-token (env SLUICE_TOKEN)")
    group.add_argument("--tls", action="store_true", default=default(False),
                       help="speak TLS to the server, trusting the system's CAs")
    group.add_argument("--tls-ca", metavar="PEM", default=default(None),
                       help="speak TLS, trusting this CA certificate (env SLUICE_TLS_CA)")
    group.add_argument("--client-cert", metavar="PEM", default=default(None),
                       help="mutual TLS: this client's certificate, with --client-key (env SLUICE_CLIENT_CERT)")
    group.add_argument("--client-key", metavar="PEM", default=default(None),
                       help="the client certificate's private key (env SLUICE_CLIENT_KEY)")
    group.add_argument("--json", action="store_true", default=default(False), help="print JSON instead of tables")


def build_parser(first: AddCommands | None = None, last: AddCommands | None = None) -> argparse.ArgumentParser:
    """The parser of the client commands; `first` and `last` add commands before and after them (the
    services' server and offline commands)."""
    parser = argparse.ArgumentParser(prog="sluice", description="Event-driven scheduler for data pipelines.")
    _global_options(parser, top=True)
    commands = parser.add_subparsers(metavar="COMMAND")
    if first is not None:
        first(commands)
    schedules_cli.register(commands)
    work_cli.register(commands)
    notify = commands.add_parser("notify", help="publish a notification").add_subparsers(metavar="KIND")
    partition = notify.add_parser("partition", help="a transaction committed partitions of a dataset")
    partition.add_argument("--namespace", required=True)
    partition.add_argument("--dataset", required=True)
    partition.add_argument("--key", action="append", default=[], metavar="K=V", help="partition key value (repeat)")
    partition.add_argument("--location", required=True, help="path or URI of the partition's files")
    partition.add_argument("--size-bytes", type=int, default=0)
    partition.add_argument("--record-count", type=int, default=0)
    partition.add_argument("--metadata", action="append", default=[], metavar="K=V")
    partition.add_argument("--id", default=None, help="notification id (default: a new UUID)")
    partition.set_defaults(handler=_notify_partition)
    lineage = commands.add_parser("lineage", help="inspect lineage").add_subparsers(metavar="ACTION")
    lineage_show = lineage.add_parser("show", help="the job tree with runs")
    lineage_show.add_argument("job", nargs="?", default="",
                              help="only this job (fully qualified or simple name) and the jobs under it")
    lineage_show.add_argument("--namespace", default="")
    lineage_show.set_defaults(handler=_show_lineage)
    datasets_cli.register(commands)
    auth_cli.register(commands)
    alerts_cli.register(commands)
    if last is not None:
        last(commands)
    _finish(commands)
    return parser


def _finish(commands: argparse._SubParsersAction) -> None:
    """Every command below the top: a group remembers its parser (run prints its help when no ACTION
    is given); a command takes the global options too (`schedules list --json`)."""
    for sub in set(commands.choices.values()):
        below = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]
        if below:
            sub.set_defaults(group_parser=sub)
            for action in below:
                _finish(action)
        else:
            taken = {option for action in sub._actions for option in action.option_strings}
            if not taken & {"--server", "--token", "--tls", "--tls-ca", "--client-cert", "--client-key", "--json"}:
                _global_options(sub, top=False)


def _notify_partition(client: SluiceClient, args) -> int:
    partition = PartitionRef(pairs(args.key, "--key"), args.location, args.size_bytes, args.record_count,
                             pairs(args.metadata, "--metadata"))
    notification_id = client.publish_partitions(args.namespace, args.dataset, [partition], args.id or str(uuid.uuid4()))
    print(json.dumps({"id": notification_id}) if args.json else f"published notification {notification_id}")
    return 0


def _show_lineage(client: SluiceClient, args) -> int:
    jobs = client.lineage_jobs(args.namespace)
    if args.job:
        jobs = render.lineage_subtree(jobs, args.job)
        if not jobs:
            where = f" namespace {args.namespace}" if args.namespace else ""
            print(f"sluice: error: no job {args.job!r} in lineage{where}", file=sys.stderr)
            return 1
        runs = [run for job in jobs for run in client.lineage_runs(job.namespace, job.name)]
    else:
        runs = client.lineage_runs()
    if args.json:
        print_json({"jobs": [jsonable(j) for j in jobs], "runs": [jsonable(r) for r in runs]})
    else:
        print(render.lineage_tree(jobs, runs) or "no lineage recorded")
    return 0


if __name__ == "__main__":
    sys.exit(main())
