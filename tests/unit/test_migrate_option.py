"""`migrate` (--migrate / --no-migrate, SLUICE_MIGRATE, `migrate` in the file): on unless turned off."""
from __future__ import annotations

from pathlib import Path

import pytest

from sluice_services.cli.main import build_parser
from sluice_services.config import ConfigError, resolve

FILE = Path("/etc/sluice/sluice.toml")


def migrate(*argv: str, env: dict[str, str] | None = None, text: str | None = None, command: str = "serve") -> bool:
    args = build_parser().parse_args([command, *(["registry"] if command == "serve" else []), *argv])
    return resolve(args, env or {}, text, service="registry" if command == "serve" else "standalone",
                   file=FILE).migrate


def test_servers_migrate_unless_told_not_to() -> None:
    assert migrate() and migrate(command="standalone")
    assert not migrate("--no-migrate") and not migrate("--no-migrate", command="standalone")
    assert not migrate(env={"SLUICE_MIGRATE": "0"}) and migrate("--migrate", env={"SLUICE_MIGRATE": "0"})
    assert not migrate(text="[sluice]\nmigrate = false\n")
    assert migrate(env={"SLUICE_MIGRATE": "yes"}, text="[services.registry]\nmigrate = false\n")


def test_a_migrate_value_that_is_not_a_boolean_is_refused() -> None:
    with pytest.raises(ConfigError, match="SLUICE_MIGRATE"):
        migrate(env={"SLUICE_MIGRATE": "maybe"})
    with pytest.raises(ConfigError, match="migrate"):
        migrate(text='[sluice]\nmigrate = "no"\n')
