"""What the offline commands (`sluice log`, `dlq`, `replay`, `rebuild`) share: where the log and the bus
are (--event-log / --bus / --data-dir, the SLUICE_* variables, or a --config file, found as the servers
find them), opening them, and how a failure reaches the operator."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable

from sluice.clock import SystemClock
from sluice.domain.errors import FailedPrecondition, InvalidArgument
from sluice.eventlog.batched import MalformedBatch
from sluice.eventlog.codec import UndecodableEvent


class OperatorError(Exception):
    """One line for the operator; exit code 1."""


def add_sources(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, metavar="FILE", help="TOML file, as for `sluice serve`")
    parser.add_argument("--data-dir", type=Path, help="where the default SQLite log and bus live (default .sluice)")
    parser.add_argument("--event-log", metavar="URL", help="sqlite:///path or postgresql://...")
    parser.add_argument("--bus", metavar="URL", help="inprocess:///path or kafka://host:port")


def offline(handler: Callable[[Any, argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        from sluice_services.config import ConfigError, load_settings  # here: a client command loads no service

        try:
            settings = load_settings(args, "standalone")
            return handler(settings, args) or 0
        except ConfigError as error:
            return fail(str(error), 2)
        except (OperatorError, InvalidArgument, FailedPrecondition) as error:
            return fail(str(error), 1)
        except MalformedBatch as error:  # names its record, stream and position
            return fail(f"the event log holds an unreadable record: {error}", 1)
        except UndecodableEvent as error:  # names its stream, version, position and type
            return fail(f"{UndecodableEvent.WHAT}: {error}", 1)
        except OSError as error:
            return fail(f"cannot open the event log or the bus: {error}", 1)
    return run


def fail(message: str, code: int) -> int:
    print(f"sluice: error: {' '.join(message.split())}", file=sys.stderr)
    return code


def open_log(settings):
    from sluice.runtime.secrets import mask_text, mask_url
    from sluice_services import adapters

    path = settings.data_dir / "events.db"
    if not settings.event_log and not path.exists():
        raise OperatorError(f"no event log at {path} (give --event-log or --data-dir)")
    try:
        # never DDL: a reader's role needs only SELECT (an unmigrated log says to run `sluice migrate`)
        return adapters.open_event_log(settings.event_log, settings.data_dir, SystemClock(), migrate=False)
    except InvalidArgument:
        raise
    except Exception as error:  # a driver's own error type: the URL is wrong or the server is down
        raise OperatorError(f"cannot open the event log {mask_url(settings.event_log) or path}: "
                            f"{mask_text(str(error), settings.event_log)}") from error


def open_bus(settings):
    from sluice_services import adapters

    path = settings.data_dir / "bus.db"
    if not settings.bus and not path.exists():
        raise OperatorError(f"no bus at {path} (give --bus or --data-dir)")
    return adapters.open_bus(settings.bus, settings.data_dir, SystemClock())
