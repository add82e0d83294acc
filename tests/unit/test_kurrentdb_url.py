"""Choosing the KurrentDB event log by URL (services/adapters.py), without a server: kurrentdbclient
opens its connection lazily, so building the adapter sends nothing."""
from __future__ import annotations

from pathlib import Path

import pytest
from kurrentdbclient.connection_spec import URI_SCHEMES_ALL, URI_SCHEMES_NON_DISCOVER

from sluice.clock import SimulatedClock
from sluice.eventlog.kurrentdb import KurrentEventLog
from sluice.eventlog.kurrentdb_codec import SCHEMES
from sluice.domain.errors import InvalidArgument
from sluice_services.adapters import KURRENTDB_SCHEMES, open_event_log


def test_the_adapters_schemes_are_kurrentdbclients() -> None:
    assert sorted(KURRENTDB_SCHEMES) == sorted(URI_SCHEMES_ALL) == sorted(SCHEMES)


@pytest.mark.parametrize("scheme", URI_SCHEMES_NON_DISCOVER)  # +discover would ask the cluster's gossip at once
def test_kurrentdb_urls_open_the_kurrentdb_adapter(scheme: str, tmp_path: Path) -> None:
    log = open_event_log(f"{scheme}://127.0.0.1:1?tls=false&streamPrefix=prod-", tmp_path, SimulatedClock())
    try:
        assert isinstance(log, KurrentEventLog)
        assert log.prefix == "prod-"
    finally:
        log.close()
    assert list(tmp_path.iterdir()) == []  # no SQLite file on the side


@pytest.mark.parametrize("url", ["kurrentdb://127.0.0.1:1?tls=false&bogus=1", "kurrentdb://127.0.0.1:1?streamPrefix=$x"])
def test_a_bad_kurrentdb_url_is_an_invalid_argument(url: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument) as raised:
        open_event_log(url, tmp_path, SimulatedClock())
    assert raised.value.field == "--event-log"


def test_an_unknown_scheme_names_the_kurrentdb_form(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="kurrentdb://"):
        open_event_log("mongodb://h/db", tmp_path, SimulatedClock())
