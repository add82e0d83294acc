"""Backends for the dataset tests: a SQLite file, and a real PostgreSQL server this package starts.

The server binaries must be installed (`make postgres`); without them the PostgreSQL tests fail
with that hint instead of skipping."""
from __future__ import annotations

from typing import Iterator

import pytest

from sluice.testing.postgres import PostgresNotInstalled, PostgresServer


@pytest.fixture(scope="package")
def postgres() -> Iterator[PostgresServer]:
    try:
        server = PostgresServer()
    except PostgresNotInstalled as missing:
        pytest.fail(str(missing), pytrace=False)
    with server:
        yield server
