"""The `sluice` console script (pyproject.toml [project.scripts]; also `python -m sluice_services.cli`):
the library's client parser with the server-side commands added around its own."""
from __future__ import annotations

import argparse
import sys

from sluice.cli import main as client_cli
from sluice_services.catalogue import NAMES
from sluice_services.cli import migrate, rebuild, replay, sre
from sluice_services.cli.serve import add_server_options, run_server
from sluice_services.web.entry import run_web
from sluice_services.web.options import add_web_options


def main(argv: list[str] | None = None) -> int:
    return client_cli.run(build_parser(), argv)


def build_parser() -> argparse.ArgumentParser:
    return client_cli.build_parser(first=_server_commands, last=_offline_commands)


def _server_commands(commands: argparse._SubParsersAction) -> None:
    standalone = commands.add_parser("standalone", help="run all five services in one process (embedded mode)")
    add_server_options(standalone)
    standalone.set_defaults(handler=lambda a: run_server(a, NAMES), server_mode=True)
    serve = commands.add_parser("serve", help="run one service")
    serve.add_argument("service", choices=(*NAMES, "web"), help="a service, or web: the web console alone")
    add_server_options(serve)
    add_web_options(serve)
    serve.set_defaults(handler=lambda a: run_web(a) if a.service == "web" else run_server(a, (a.service,)),
                       server_mode=True)


def _offline_commands(commands: argparse._SubParsersAction) -> None:
    sre.add_commands(commands)
    replay.add_command(commands)
    rebuild.add_command(commands)
    migrate.add_command(commands)
