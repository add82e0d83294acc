"""`sluice serve web`'s own options; light (argparse only), so building the `sluice` parser loads no
web server."""
from __future__ import annotations

import argparse

APIS = ("registry", "checker", "datasets", "launcher", "lineage", "alerts")
"""Where each API lives: registry (ScheduleRegistry, Access, DeadLetters, EventLog), checker (Jobs),
datasets (Partitions), launcher (Runs), lineage (Lineage), alerts (Alerts)."""
WHAT = {"registry": "ScheduleRegistry, Access, DeadLetters and EventLog", "checker": "Jobs", "datasets": "Partitions",
        "launcher": "Runs", "lineage": "Lineage", "alerts": "Alerts"}


def add_web_options(parser: argparse.ArgumentParser) -> None:
    """The addresses of the services the console reads (default: the global --server)."""
    group = parser.add_argument_group("serve web", "where the console finds each API (default: --server)")
    for api in APIS:
        group.add_argument(f"--{api}-server", metavar="HOST:PORT",
                           help=f"the {api} service's gRPC address ({WHAT[api]})")

