"""`sluice migrate`: create or update the event log's schema, alone, with a role that has the rights
to (servers do it at start unless --no-migrate; read-only tools never do)."""
from __future__ import annotations

import argparse

from sluice_services.cli.offline import add_sources, fail


def add_command(commands: argparse._SubParsersAction) -> None:
    migrate = commands.add_parser("migrate", help="create or update the event log's schema (PostgreSQL)")
    add_sources(migrate)
    migrate.set_defaults(handler=_migrate, server_mode=True)


def _migrate(args: argparse.Namespace) -> int:
    from sluice.runtime.secrets import mask_text, mask_url
    from sluice_services.config import ConfigError, load_settings

    try:
        settings = load_settings(args, "standalone")
    except ConfigError as error:
        return fail(str(error), 2)
    url = settings.event_log
    if not url.startswith(("postgresql://", "postgres://")):
        print(f"sluice migrate: nothing to do: {mask_url(url) or 'the SQLite log'} sets up its own schema")
        return 0
    import psycopg

    from sluice.eventlog.postgres import migrate

    try:
        version = migrate(url)
    except psycopg.Error as error:
        return fail(f"cannot migrate {mask_url(url)}: {mask_text(str(error), url)}", 1)
    print(f"sluice migrate: {mask_url(url)} is at schema version {version}")
    return 0
