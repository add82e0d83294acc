"""Snapshots are versioned msgpack of declared types (sluice.runtime.state_codec): every service's
state round-trips to an equal value of the same types; a snapshot is kept across code changes that
leave its state's shape alone (a comment, a fold) and dropped when its version is bumped; no bytes,
a pickle included, run code."""
from __future__ import annotations

import dataclasses
import hashlib
import importlib
import struct
import sys
import zlib
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from types import MappingProxyType
from typing import Any

import immutables
import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from sluice.domain.apps import AppState
from sluice.domain.checking import CheckerState, QueuedJob, TrackedSchedule, WorldFacts
from sluice.domain.common import ProgramRef
from sluice.domain.datasets.transactions import DatasetCreated
from sluice.domain.lineage import RunFacts
from sluice.domain.matching import MatcherState
from sluice.domain.runs import Run
from sluice.domain.schedules import ScheduleState
from sluice.domain.triggers.specs import FrozenMap
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.readmodels.jobs import JobView
from sluice.runtime.aggregates import Loaded
from sluice.runtime.map_snapshots import Delta
from sluice.runtime.snapshots import Schema, Snapshots, SnapshotUnusable, pack, unpack

EXAMPLES = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))


def same(a: Any, b: Any, path: str = "state") -> None:
    """Equal, and of the same types all the way down (a FrozenMap equals a dict, a tuple does not
    equal a list, an aware datetime equals another zone's)."""
    if isinstance(a, Mapping) and type(a) not in (dict, immutables.Map, MappingProxyType, FrozenMap):
        a = dict(a)  # another mapping (a ChainMap from hypothesis) is read back a dict, as events are
    assert type(a) is type(b), f"{path}: {type(a).__name__} became {type(b).__name__}"
    if dataclasses.is_dataclass(a):
        for field in dataclasses.fields(a):
            same(getattr(a, field.name), getattr(b, field.name), f"{path}.{field.name}")
    elif isinstance(a, (dict, immutables.Map, MappingProxyType, FrozenMap)):
        assert list(a) == list(b), path
        for key in a:
            same(a[key], b[key], f"{path}[{key!r}]")
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b), path
        for index, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}[{index}]")
    elif isinstance(a, datetime):
        assert (a, a.tzinfo, a.fold) == (b, b.tzinfo, b.fold), path
    elif a == a:  # NaN aside
        assert a == b, path


def round_trip(state: Any, schema: Schema, name: str = "state") -> Any:
    try:
        data = pack(state, schema, name, lambda: None)
    except OverflowError:  # an integer beyond 64 bits (msgpack's): not snapshotted, see state_codec
        reject()
    restored = unpack(data, schema, name)
    same(state, restored)
    return restored


def entries(values: st.SearchStrategy, max_size: int = 5) -> st.SearchStrategy:
    """A map snapshot's base: stream -> Loaded(state, version)."""
    return st.dictionaries(st.text(max_size=8), st.builds(Loaded, values, st.integers(-1, 10**6)), max_size=max_size)


@EXAMPLES
@given(entries(st.from_type(MatcherState)))
def test_the_matchers_states_round_trip(state):
    round_trip(state, Schema(dict[str, Loaded[MatcherState]], 1))


@EXAMPLES
@given(entries(st.from_type(ScheduleState)), entries(st.from_type(AppState)))
def test_the_registrys_states_round_trip(schedules, apps):
    round_trip(schedules, Schema(dict[str, Loaded[ScheduleState]], 1))
    round_trip(apps, Schema(dict[str, Loaded[AppState]], 1))


programs = st.from_type(ProgramRef)
checker_states = st.builds(
    CheckerState,
    queue=st.dictionaries(st.text(max_size=6), st.from_type(QueuedJob), max_size=3).map(immutables.Map),
    queued_by_program=st.dictionaries(programs, st.dictionaries(st.text(max_size=6), st.none(), max_size=2)
                                      .map(immutables.Map), max_size=2).map(immutables.Map),
    world=st.from_type(WorldFacts),
    schedules=st.dictionaries(st.text(max_size=6), st.from_type(TrackedSchedule), max_size=3).map(immutables.Map),
    group_refs=st.dictionaries(st.tuples(st.text(max_size=6), programs), st.integers(), max_size=3),
    horizon=st.timedeltas(), watched=st.frozensets(programs, max_size=3), watch_all=st.booleans(),
    joinable=st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=2).map(immutables.Map))


@EXAMPLES
@given(entries(checker_states, max_size=2))
def test_the_checkers_state_round_trips(state):
    round_trip(state, Schema(dict[str, Loaded[CheckerState]], 1))


@EXAMPLES
@given(entries(st.none() | st.from_type(Run)))
def test_the_launchers_runs_round_trip(state):
    round_trip(state, Schema(dict[str, Loaded[Run | None]], 1))


@EXAMPLES
@given(st.dictionaries(st.text(max_size=8), st.from_type(JobView), max_size=5))
def test_the_jobs_view_round_trips(state):
    round_trip(state, Schema(dict[str, JobView], 1))


times = st.datetimes(timezones=st.just(timezone.utc))
texts = st.text(max_size=6)
run_facts = st.builds(
    RunFacts, run_id=texts,
    job=st.none() | st.tuples(times, st.integers(0, 5), texts, texts),
    claims=st.frozensets(st.tuples(texts, texts), max_size=3),
    parent=st.none() | st.tuples(times, st.integers(0, 5), texts, texts, texts),
    terminal=st.none() | st.tuples(times, st.integers(0, 5), texts),
    progress=st.none() | st.tuples(times, st.integers(0, 5), texts),
    first_start=st.none() | times, first_seen=st.none() | times, last_seen=st.none() | times,
    inputs=st.lists(texts, max_size=3).map(tuple), outputs=st.lists(texts, max_size=3).map(tuple),
    partitions=st.lists(st.tuples(texts, st.lists(st.tuples(texts, texts), max_size=2).map(tuple)),
                        max_size=2).map(tuple),
    seen=st.lists(st.tuples(texts, times), max_size=3).map(tuple))


@EXAMPLES
@given(st.dictionaries(texts, run_facts, max_size=5))
def test_the_lineage_facts_round_trip(state):
    round_trip(state, Schema(dict[str, RunFacts], 1))


@EXAMPLES
@given(st.lists(run_facts, max_size=5))
def test_the_lineage_snapshot_columns_round_trip(facts):
    from sluice_services.lineage.service import SNAPSHOT_VERSION
    from sluice_services.lineage.snapshot import LineageColumns, columns, run_facts as facts_of

    state = {f.run_id: f for f in facts}
    restored = facts_of(round_trip(columns(state), Schema(LineageColumns, SNAPSHOT_VERSION)))
    same(list(state.values()), restored)


def test_lineage_columns_that_disagree_are_unusable():
    from sluice_services.lineage.snapshot import ColumnsUnusable, columns, pack_ints, run_facts as facts_of

    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    good = columns({"r": RunFacts("r", job=(t0, 1, "ns", "job"), inputs=("a", "b"), seen=(("START", t0),))})
    assert facts_of(good)[0].inputs == ("a", "b")
    for damaged in (dataclasses.replace(good, inputs=good.inputs[:4]),           # fewer than its count
                    dataclasses.replace(good, inputs=good.inputs[:6]),           # cut inside an integer
                    dataclasses.replace(good, counts=pack_ints([0, 3, 0, 0, 1])),  # more than the column
                    dataclasses.replace(good, run_ids=["r", "s"]),               # columns of other lengths
                    dataclasses.replace(good, job=pack_ints([0, 1, 0, 99])),     # a string that is not there
                    dataclasses.replace(good, seen=pack_ints([0, 7]))):          # a time that is not there
        with pytest.raises(ColumnsUnusable):
            facts_of(damaged)


@EXAMPLES
@given(st.lists(st.from_type(DatasetCreated), max_size=3).map(tuple), st.lists(texts, max_size=3).map(tuple))
def test_the_launchers_datasets_round_trip(created, unfinished):
    round_trip((created, unfinished), Schema(tuple[tuple[DatasetCreated, ...], tuple[str, ...]], 1))


@EXAMPLES
@given(st.datetimes(timezones=st.none() | st.timezones() | st.just(timezone.utc)), st.timedeltas())
def test_zoned_datetimes_and_timedeltas_round_trip(at, delta):
    round_trip((at, delta), Schema(tuple[datetime, timedelta], 1))


@EXAMPLES
@given(st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats() | st.text() | st.binary()
                    | times, lambda inner: st.lists(inner, max_size=3) | st.lists(inner, max_size=3).map(tuple)
                    | st.frozensets(st.text(max_size=3), max_size=3)
                    | st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=12))
def test_untyped_plain_data_round_trips_with_its_containers(value):
    round_trip(value, Schema(Any, 1))


def test_a_delta_round_trips():
    delta = Delta(b"\x01" * 32, 7, {"a": Loaded((1, 2), 3)}, ("b", "c"))
    round_trip(delta, Schema(Delta[str, Loaded[tuple]], 1))


# -- no code from bytes --------------------------------------------------------------------------

def pickle_running(command: str) -> bytes:
    """A snapshot of the pickled format, as an attacker would write it: `builtins.getattr(
    sluice.bus.inprocess.os, "system")(command)` in pickle opcodes, behind its SHA-256."""
    def text(value: str) -> bytes:
        return b"X" + struct.pack("<I", len(value.encode())) + value.encode()

    payload = b"cbuiltins\ngetattr\n(csluice.bus.inprocess\nos\n" + text("system") + b"tR(" + text(command) + b"tR."
    body = zlib.compress(payload)
    return hashlib.sha256(body).digest() + body


def test_a_pickle_is_not_a_snapshot_and_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    schema = Schema(dict[str, Loaded[MatcherState]], 1)
    with pytest.raises(SnapshotUnusable):
        unpack(pickle_running(f"touch {marker}"), schema, "matcher")
    log = SqliteEventLog(tmp_path / "events.db")
    from sluice.eventlog.snapshots import Snapshot
    log.save_snapshot(Snapshot("matcher", 1, schema.id("matcher"), pickle_running(f"touch {marker}")))
    assert Snapshots(log, "matcher", schema).load() is None
    assert not marker.exists()
    log.close()


# -- versions, not source text -------------------------------------------------------------------

TOY = '''
from dataclasses import dataclass


@dataclass(frozen=True)
class Counter:
    count: int
    seen: tuple[str, ...] = ()


def evolve(state: Counter, event: str) -> Counter:
    return Counter(state.count + 1, (*state.seen, event))
'''


@pytest.fixture
def toy_module(tmp_path, monkeypatch):
    path = tmp_path / "toy_state.py"
    path.write_text(TOY)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("toy_state")
    yield path, module
    sys.modules.pop("toy_state", None)


def reloaded(path, source: str):
    path.write_text(source)
    importlib.invalidate_caches()
    sys.modules.pop("toy_state", None)
    return importlib.import_module("toy_state")


def test_a_comment_or_a_changed_fold_keeps_the_snapshot(tmp_path, toy_module):
    path, toy = toy_module
    log = SqliteEventLog(tmp_path / "events.db")
    Snapshots(log, "toy", Schema(toy.Counter, 1)).save(5, toy.Counter(2, ("a", "b")))
    changed = reloaded(path, "# a comment, and a fold that changed\n" + TOY.replace("state.count + 1", "1 + state.count"))
    loaded = Snapshots(log, "toy", Schema(changed.Counter, 1)).load()
    assert loaded == (5, changed.Counter(2, ("a", "b"))) and type(loaded[1]) is changed.Counter
    log.close()


def test_a_bumped_version_or_another_shape_drops_the_snapshot(tmp_path, toy_module, caplog):
    path, toy = toy_module
    log = SqliteEventLog(tmp_path / "events.db")
    Snapshots(log, "toy", Schema(toy.Counter, 1)).save(5, toy.Counter(2, ("a", "b")))
    grown = reloaded(path, TOY.replace("    seen: tuple[str, ...] = ()", "    seen: tuple[str, ...] = ()\n    more: int = 0"))
    assert Snapshots(log, "toy", Schema(grown.Counter, 2)).load() is None  # bumped, as it should be
    assert "another schema" in caplog.text
    assert Snapshots(log, "toy", Schema(grown.Counter, 1)).load() is None  # not bumped: its shape still tells
    assert "unusable" in caplog.text
    log.close()


def test_damaged_bytes_drop_the_snapshot(tmp_path):
    log = SqliteEventLog(tmp_path / "events.db")
    schema = Schema(dict[str, int], 1)
    Snapshots(log, "toy", schema).save(3, {"a": 1})
    good = log.read_snapshot("toy")
    log.save_snapshot(dataclasses.replace(good, data=good.data[:-1] + bytes([good.data[-1] ^ 1])))
    assert Snapshots(log, "toy", schema).load() is None
    log.save_snapshot(good)
    assert Snapshots(log, "toy", schema).load() == (3, {"a": 1})
    log.close()
