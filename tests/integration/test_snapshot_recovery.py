"""Recovery from a snapshot plus the log after it gives the state a full fold gives, per service
(registry, matcher, checker, launcher) and for the jobs read model, on SQLite and PostgreSQL; a
snapshot of another schema version or with damaged bytes is ignored (full fold), never trusted, and
bytes written into the snapshot store by anyone run no code."""
from __future__ import annotations

import hashlib
import struct
import zlib
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from sluice.clock import SimulatedClock
from sluice.domain.common import ProgramRef
from sluice.domain.runs import MarkFailed, RequestRun
from sluice.domain.schedules import Schedule
from sluice.domain.triggers import PartitionTrigger, QuietPeriodTrigger, TimeTrigger
from sluice.eventlog.postgres import PostgresEventLog
from sluice.eventlog.snapshots import Snapshot
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.eventlog.truncated import LogUntil
from sluice.ids import run_id_for
from sluice.readmodels.jobs import JobsView
from sluice.runtime import snapshots
from sluice_services.checker.service import CheckerService
from sluice_services.launcher.programs import DirectoryCatalog, SparkSubmitter
from sluice_services.launcher.service import LauncherService
from sluice_services.matcher.service import MatcherService
from sluice_services.registry.service import RegistryService
from tests.scenarios.conftest import T0
from tests.support import simulated
from tests.support.simulated import SimulatedScheduler

pytestmark = pytest.mark.integration

SNAPSHOT_EVERY = 7
"""Small, so that every service snapshots several times in the workload and keeps a tail after it."""


class CountingLog:
    """The log, counting the events recovery reads with read_all and read_stream."""

    def __init__(self, log: Any) -> None:
        self._log = log
        self.events_read = 0

    def read_all(self, after: int = 0, limit: int = 1000, prefixes=()):
        events = self._log.read_all(after, limit, prefixes)
        self.events_read += len(events)
        return events

    def read_stream(self, stream: str, from_version: int = 0, limit: int | None = None):
        events = self._log.read_stream(stream, from_version, limit)
        self.events_read += len(events)
        return events

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)


@pytest.fixture(params=["sqlite", "postgres"])
def open_log(request, tmp_path: Path):
    opened = []
    if request.param == "sqlite":
        def make(clock):
            return SqliteEventLog(tmp_path / "events.db", clock=clock)
    else:
        dsn = request.getfixturevalue("postgres").create_database()

        def make(clock):
            return PostgresEventLog(dsn, clock=clock)

    def open_(clock=None):
        log = make(clock or SimulatedClock(T0))
        opened.append(log)
        return log

    yield open_
    for log in opened:
        log.close()


def schedule(name: str, trigger) -> Schedule:
    return Schedule("", name, ProgramRef("ns", "app", "workflow"), trigger, enabled=True)


@pytest.fixture
async def history(open_log, monkeypatch, tmp_path: Path):
    """A workload through the real services, snapshotting every SNAPSHOT_EVERY events: schedules of
    several trigger kinds created, updated and deleted, partitions, cron fires, runs ending."""
    monkeypatch.setattr(snapshots, "SNAPSHOT_EVERY", SNAPSHOT_EVERY)
    monkeypatch.setattr(simulated, "SqliteEventLog", lambda path, clock: open_log(clock))
    scheduler = SimulatedScheduler(tmp_path, T0, launcher=False)  # its runs are decided below, by hand
    for service in (scheduler.registry, scheduler.matcher, scheduler.checker):
        service.recover()  # as every service starts: from then on its snapshots carry a position
    await scheduler.create(schedule("hourly", TimeTrigger("0 * * * *", "UTC")))
    for index in range(6):
        await scheduler.create(schedule(f"feed{index}", PartitionTrigger("ns", f"feed{index % 3}", 2)))
    await scheduler.create(schedule("quiet", QuietPeriodTrigger("ns", "feed0", 600)))
    for hour in range(5):
        for dataset in ("feed0", "feed1", "feed2"):
            await scheduler.partitions("ns", dataset, {"hour": f"{hour:02d}"})
        await scheduler.advance(timedelta(minutes=40))
        for launch in scheduler.launches[-2:]:
            await scheduler.finish(launch)
    await scheduler.update(replace(schedule("feed1", PartitionTrigger("ns", "feed1", 3)), properties={"v": "2"}))
    await scheduler.delete(schedule("feed2", PartitionTrigger("ns", "feed2", 2)))
    await scheduler.partitions("ns", "feed1", {"hour": "09"})
    launcher = LauncherService(scheduler.log, scheduler.clock, DirectoryCatalog(tmp_path), SparkSubmitter(), tmp_path)
    launcher.recover()
    for index, launch in enumerate(scheduler.launches):
        run_id = run_id_for(launch.job.id)
        launcher._decide(run_id, RequestRun(launch.job))
        if index % 2:
            launcher._decide(run_id, MarkFailed("exit code 1"))
    assert len(scheduler.launches) >= 10
    yield scheduler
    scheduler.close()


def recovered(log: Any, tmp_path: Path) -> dict[str, Any]:
    clock = SimulatedClock(T0 + timedelta(days=1))
    registry, matcher, checker = RegistryService(log, clock), MatcherService(log, clock), CheckerService(log, clock)
    launcher = LauncherService(log, clock, DirectoryCatalog(tmp_path), SparkSubmitter(), tmp_path)
    jobs = JobsView()
    for service in (registry, matcher, checker, launcher):
        service.recover()
    jobs.recover(log)
    return {"registry": registry.list(), "matcher": matcher.states(), "checker": checker.state,
            "launcher": launcher.runs(), "jobs": jobs.list()}


def full_fold(log: Any, tmp_path: Path) -> dict[str, Any]:
    return recovered(LogUntil(log, log.head_position()), tmp_path)  # a view of the log keeps no snapshots


NAMES = ("registry-schedules", "registry-apps", "matcher", "checker", "launcher-runs", "jobs")


async def test_snapshot_and_tail_equal_a_full_fold_for_every_service(history, open_log, tmp_path) -> None:
    log = open_log()  # a new connection: a restart, or another machine after failover
    expected = full_fold(log, tmp_path)
    assert expected["matcher"] and expected["checker"].schedules and expected["launcher"] and expected["jobs"]
    for name in ("registry-schedules", "matcher", "checker", "launcher-runs"):
        saved = log.read_snapshot(name)
        assert saved is not None and saved.schema, name
    assert 0 < log.read_snapshot("matcher").position <= log.head_position()
    assert recovered(log, tmp_path) == expected


async def test_a_restart_reads_only_the_log_after_the_snapshot(history, open_log, tmp_path) -> None:
    log = open_log()
    expected = full_fold(log, tmp_path)
    for name in NAMES:
        log.delete_snapshot(name)
    without = CountingLog(log)
    assert recovered(without, tmp_path) == expected  # a full fold, which snapshots every store at its end
    await history.partitions("ns", "feed0", {"hour": "10"})
    with_snapshots = CountingLog(open_log())
    after = recovered(with_snapshots, tmp_path)
    assert after == full_fold(log, tmp_path) and after != expected
    assert with_snapshots.events_read * 5 < without.events_read, (with_snapshots.events_read, without.events_read)


async def test_recovery_writes_a_snapshot_when_it_folded_a_long_tail(history, open_log, tmp_path) -> None:
    log = open_log()
    for name in NAMES:
        log.delete_snapshot(name)
    recovered(log, tmp_path)
    assert log.read_snapshot("matcher").position == log.head_position()
    assert log.read_snapshot("jobs").position == log.head_position()


def schema_of_stored(snapshot: Snapshot, state: Any) -> snapshots.Schema:
    """A schema with the stored snapshot's version, declaring another state."""
    return snapshots.Schema(state, int(snapshot.schema.rsplit(":", 1)[1]))


@pytest.mark.parametrize("damage", ["another version", "flipped byte", "not a snapshot", "another state"])
async def test_an_unusable_snapshot_is_ignored_and_the_log_folded(history, open_log, tmp_path, damage, caplog) -> None:
    log = open_log()
    expected = full_fold(log, tmp_path)
    for name in NAMES:
        if (good := log.read_snapshot(name)) is None:
            continue
        if damage == "another version":  # as written by a release whose state has another shape
            format_, stored, version = good.schema.rsplit(":", 2)
            bad = replace(good, schema=f"{format_}:{stored}:{int(version) + 1}")
        elif damage == "flipped byte":
            bad = replace(good, data=good.data[:-1] + bytes([good.data[-1] ^ 1]))
        elif damage == "not a snapshot":
            bad = replace(good, data=b"garbage")
        else:  # well-formed, of this schema's name and version, but holding something else
            bad = replace(good, data=snapshots.pack(("/etc/passwd", 0), schema_of_stored(good, tuple[str, int]), name))
        log.save_snapshot(bad)
    assert recovered(log, tmp_path) == expected
    assert "folding the whole log" in caplog.text


async def test_a_snapshot_that_is_state_of_another_shape_is_ignored(history, open_log, tmp_path) -> None:
    log = open_log()
    expected = full_fold(log, tmp_path)
    for name in NAMES:
        if (good := log.read_snapshot(name)) is None:
            continue
        data = snapshots.pack(["not", "states"], schema_of_stored(good, list[str]), name)
        log.save_snapshot(Snapshot(name, log.head_position(), good.schema, data))
    assert recovered(log, tmp_path) == expected


def pickle_running(command: str) -> bytes:
    """What an attacker who can write to the event store would store as a snapshot: protocol-0 pickle
    opcodes for `builtins.getattr(sluice.bus.inprocess.os, "system")(command)` (both names the
    unpickler of the pickled format admitted), zlib-compressed behind their SHA-256 as that format's
    snapshots were."""
    def text(value: str) -> bytes:
        return b"X" + struct.pack("<I", len(value.encode())) + value.encode()

    payload = (b"cbuiltins\ngetattr\n(csluice.bus.inprocess\nos\n" + text("system") + b"tR("
               + text(command) + b"tR.")
    body = zlib.compress(payload)
    return hashlib.sha256(body).digest() + body


async def test_a_pickle_written_as_a_snapshot_runs_no_code_and_the_log_is_folded(
        history, open_log, tmp_path, caplog) -> None:
    """The event store is no code-execution channel: a pickle calling os.system, stored in every
    service's snapshot under the very schema the service expects, is not run; each service folds."""
    log = open_log()
    expected = full_fold(log, tmp_path)
    marker = tmp_path / "pwned"
    replaced = 0
    for name in NAMES:
        if (good := log.read_snapshot(name)) is None:
            continue
        log.save_snapshot(replace(good, data=pickle_running(f"touch {marker}")))
        replaced += 1
    assert replaced >= 4
    assert recovered(log, tmp_path) == expected
    assert not marker.exists()
    assert "folding the whole log" in caplog.text


async def test_a_bumped_schema_version_folds_the_whole_log(history, open_log, tmp_path, monkeypatch, caplog) -> None:
    """A developer who changes the matcher's state bumps its SNAPSHOT_VERSION: the old snapshot is not
    read, the whole log is, and the new snapshot has the new version."""
    from sluice_services.matcher import service as matcher_service

    log = open_log()
    expected = full_fold(log, tmp_path)
    before = log.read_snapshot("matcher").schema
    monkeypatch.setattr(matcher_service, "SNAPSHOT_VERSION", matcher_service.SNAPSHOT_VERSION + 1)
    counting = CountingLog(log)
    matcher = MatcherService(counting, SimulatedClock(T0 + timedelta(days=1)))
    matcher.recover()
    assert matcher.states() == expected["matcher"]
    assert counting.events_read == len(log.read_all(0, 1_000_000, (matcher_service.STREAM_PREFIX,)))  # its every event
    assert "matcher at position" in caplog.text and "another schema" in caplog.text
    assert log.read_snapshot("matcher").schema == before[:-1] + str(matcher_service.SNAPSHOT_VERSION)


async def test_the_data_plane_recovers_its_datasets_from_a_snapshot(history, open_log, tmp_path) -> None:
    from sluice.domain.datasets import DatasetSpec, KeySpec
    from sluice_services.datasets.service import DatasetsService

    log = open_log()
    first = DatasetsService(log, history.clock)
    for index in range(3):
        first.datasets.create(DatasetSpec("ns", f"d{index}", (KeySpec("hour"),), f"/data/ns/d{index}"))
    first.recover()  # a long read: saves the datasets and the unfinished sequences (none)
    assert log.read_snapshot("launcher-datasets").position == log.head_position()
    counting = CountingLog(open_log())
    again = DatasetsService(counting, history.clock)
    again.recover()
    assert [s.name for s in again.datasets.list("ns")] == ["d0", "d1", "d2"]
    assert counting.events_read == 0


async def test_after_a_restart_from_a_snapshot_redelivered_records_change_nothing(open_log, monkeypatch) -> None:
    """The consumed offsets stored with the appends agree with the snapshot + tail: what was consumed
    before the restart is skipped, what was not is applied."""
    from sluice.bus.port import Record
    from sluice.domain.checking import ObserveSchedule

    monkeypatch.setattr(snapshots, "SNAPSHOT_EVERY", 3)
    clock = SimulatedClock(T0)
    records = [(Record("sluice.schedules", 0, offset, b"k", b"", (), 0),
                ObserveSchedule(f"s{offset}", schedule(f"s{offset}", PartitionTrigger("ns", "feed", 1))))
               for offset in range(12)]
    first = CheckerService(open_log(clock), clock)
    first.recover()
    for item in records[:10]:
        await first.apply([item])
    log = open_log(clock)
    assert log.read_snapshot("checker") is not None
    head, before = log.head_position(), first.state
    restarted = CheckerService(log, clock)
    restarted.recover()
    assert restarted.state == before
    await restarted.apply(records[:10])  # redelivered after the restart
    assert log.head_position() == head and restarted.state == before
    await restarted.apply(records[8:])
    assert set(restarted.state.schedules) == {f"s{offset}" for offset in range(12)}
