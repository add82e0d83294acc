"""`sluice serve web`'s handler, importing the web server only when it runs (so `sluice --help` does not)."""
from __future__ import annotations

import argparse


def run_web(args: argparse.Namespace) -> int:
    from sluice_services.web.server import run_web as run

    return run(args)
