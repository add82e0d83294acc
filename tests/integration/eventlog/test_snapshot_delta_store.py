"""Incremental snapshots keep a base and a delta as two snapshot names (`<name>` and `<name>+delta`)
on every adapter, through the unchanged port: SQLite, PostgreSQL, KurrentDB (fake, and live when
SLUICE_KURRENTDB_URL is set)."""
from __future__ import annotations

import pytest

from sluice.eventlog.port import NO_STREAM
from sluice.runtime.map_snapshots import DELTA_SUFFIX, MapSnapshots
from sluice.runtime.snapshots import Schema

from tests.integration.eventlog.contract import everything, new_events
from tests.integration.eventlog.test_snapshot_store import open_log  # noqa: F401 (the adapters' fixture)

pytestmark = pytest.mark.integration
SCHEMA = Schema(dict[str, int], 1)


def test_base_and_delta_are_two_names_that_survive_reopening(open_log) -> None:  # noqa: F811
    log = open_log()
    log.append("s", new_events(3), NO_STREAM)
    writer = MapSnapshots(log, "matcher", SCHEMA)
    assert writer.save(2, {f"k{i}": i for i in range(10)}, ())
    assert writer.save(3, {**{f"k{i}": i for i in range(10)}, "k1": 100, "new": 7}, {"k1", "new", "k9"})
    assert log.read_snapshot("matcher").position == 2
    assert log.read_snapshot("matcher" + DELTA_SUFFIX).position == 3
    expected = {**{f"k{i}": i for i in range(10)}, "k1": 100, "new": 7}
    assert MapSnapshots(open_log(), "matcher", SCHEMA).load() == (3, expected)
    assert [e.stream for e in everything(log)] == ["s", "s", "s"]  # neither is an event of the log


def test_deleting_drops_base_and_delta(open_log) -> None:  # noqa: F811
    log = open_log()
    writer = MapSnapshots(log, "jobs", SCHEMA)
    writer.save(5, {"a": 1, "b": 2, "c": 3}, ())
    writer.save(6, {"a": 1, "b": 20, "c": 3}, {"b"})
    assert writer.delete() is True
    assert log.read_snapshot("jobs") is None and log.read_snapshot("jobs" + DELTA_SUFFIX) is None
    assert MapSnapshots(open_log(), "jobs", SCHEMA).load() is None
    writer.save(7, {"a": 1}, ())  # after a delete the next save is a base
    assert MapSnapshots(open_log(), "jobs", SCHEMA).load() == (7, {"a": 1})
