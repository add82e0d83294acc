"""`sluice rebuild PROJECTION`: snapshots dropped and written again from a full fold of the log,
offline on the SQLite log; the rebuilt state is what the services recover; bad input is one line."""
from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from sluice.clock import SimulatedClock
from sluice.domain.common import ProgramRef
from sluice.domain.datasets import DatasetSpec, KeySpec, KeyType, Partition
from sluice.domain.schedules import Schedule
from sluice.domain.triggers import PartitionTrigger
from sluice.eventlog.port import ANY_VERSION, NewEvent
from sluice.eventlog.snapshots import Snapshot
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.readmodels.jobs import JobsView
from sluice_services.catalogue import DATASETS
from sluice_services.checker.service import CheckerService
from sluice_services.datasets.service import DatasetsService
from sluice_services.matcher.decisions import PARTITION_STREAM_PREFIX
from sluice_services.matcher.service import MatcherService
from tests.scenarios.conftest import T0
from tests.support.simulated import SimulatedScheduler

pytestmark = pytest.mark.integration


def sluice(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sluice_services.cli", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture
async def data_dir(tmp_path: Path) -> Path:
    scheduler = SimulatedScheduler(tmp_path, T0)
    for index in range(4):
        await scheduler.create(Schedule("", f"s{index}", ProgramRef("ns", "app", "p"),
                                        PartitionTrigger("ns", "feed", 1), enabled=True))
    for hour in range(3):
        await scheduler.partitions("ns", "feed", {"hour": f"{hour:02d}"})
        await scheduler.advance(timedelta(minutes=5))
    assert len(scheduler.launches) == 12
    scheduler.close()
    return tmp_path


def test_rebuild_jobs_writes_the_snapshot_the_view_recovers_from(data_dir: Path) -> None:
    log = SqliteEventLog(data_dir / "events.db")
    log.save_snapshot(Snapshot("jobs", 1, "stale", b"stale"))
    log.close()
    result = sluice("--json", "rebuild", "jobs", "--data-dir", str(data_dir))
    assert result.returncode == 0, result.stderr
    (report,) = json.loads(result.stdout)
    assert report["projection"] == "jobs" and report["entities"] == 12 and report["snapshots"] == ["jobs"]
    log = SqliteEventLog(data_dir / "events.db")
    try:
        snapshot = log.read_snapshot("jobs")
        assert snapshot.schema != "stale" and snapshot.position == log.head_position() == report["position"]
        view = JobsView()
        assert view.recover(log) == 0  # nothing after the snapshot
        assert len(view.list()) == 12
    finally:
        log.close()


def test_rebuild_snapshots_rebuilds_every_service_as_a_table(data_dir: Path) -> None:
    result = sluice("rebuild", "snapshots", "--data-dir", str(data_dir))
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split()[:4] == ["PROJECTION", "POSITION", "ENTITIES", "SECONDS"]
    by_name = {row.split()[0]: row.split() for row in rows if row.strip() and not set(row.strip()) <= {"-", " "}}
    assert set(by_name) >= {"registry", "matcher", "checker", "launcher", "datasets", "jobs"}
    assert by_name["matcher"][2] == "4" and by_name["jobs"][2] == "12"
    log = SqliteEventLog(data_dir / "events.db")
    try:
        for name in ("registry-schedules", "matcher", "checker", "jobs"):
            assert log.read_snapshot(name) is not None, name
        clock = SimulatedClock()
        matcher, checker = MatcherService(log, clock), CheckerService(log, clock)
        matcher.recover()
        checker.recover()
        assert len(matcher.states()) == 4 and len(checker.state.schedules) == 4
    finally:
        log.close()


def test_rebuild_lineage_and_one_service(data_dir: Path) -> None:
    lineage = sluice("--json", "rebuild", "lineage", "--data-dir", str(data_dir))
    assert lineage.returncode == 0, lineage.stderr
    assert json.loads(lineage.stdout)[0]["projection"] == "lineage"
    matcher = sluice("--json", "rebuild", "matcher", "--data-dir", str(data_dir))
    assert json.loads(matcher.stdout)[0] | {"seconds": 0} == {
        "projection": "matcher", "snapshots": ["matcher"], "position": json.loads(matcher.stdout)[0]["position"],
        "entities": 4, "seconds": 0}


def test_rebuild_datasets_writes_the_snapshot_the_datasets_service_recovers_from(tmp_path: Path) -> None:
    log = SqliteEventLog(tmp_path / "events.db", clock=SimulatedClock(T0))
    plane = DatasetsService(log, SimulatedClock(T0))
    for name in ("clicks", "views"):
        plane.datasets.create(DatasetSpec("web", name, (KeySpec("hour", KeyType.INT),), str(tmp_path / name)))
    plane.datasets.add("web", "clicks", [Partition({"hour": "1"}, str(tmp_path / "clicks" / "hour=1"))])
    (snapshot_name,) = DATASETS.snapshots
    log.save_snapshot(Snapshot(snapshot_name, 1, "stale", b"stale"))
    log.close()
    result = sluice("--json", "rebuild", "datasets", "--data-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    (report,) = json.loads(result.stdout)
    assert report["projection"] == "datasets" and report["entities"] == 2 and report["snapshots"] == [snapshot_name]
    log = SqliteEventLog(tmp_path / "events.db")
    try:
        snapshot = log.read_snapshot(snapshot_name)
        assert snapshot.schema != "stale" and snapshot.position == log.head_position() == report["position"]
        recovered = DatasetsService(log, SimulatedClock(T0))
        recovered.recover()
        assert sorted(spec.name for spec in recovered.datasets.list()) == ["clicks", "views"]
    finally:
        log.close()


def test_unknown_projection_is_one_line_and_exit_2(data_dir: Path) -> None:
    result = sluice("rebuild", "nonsense", "--data-dir", str(data_dir))
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("sluice: error:") and "nonsense" in line and "jobs" in line
    assert result.stdout == ""


def test_missing_log_is_one_line(tmp_path: Path) -> None:
    result = sluice("rebuild", "jobs", "--data-dir", str(tmp_path / "nowhere"))
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert "no event log" in line


def test_an_unknown_service_is_one_line_and_exit_2(data_dir: Path) -> None:
    result = sluice("rebuild", "launcher", "--service", "nonsense", "--data-dir", str(data_dir))
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("sluice: error: --service:") and "nonsense" in line and "standalone" in line


@pytest.mark.parametrize("stream, event, service, named", [
    ("schedule-x", NewEvent("e-json", "ScheduleEnabled", b"{not json"), "registry", "ScheduleEnabled: JSONDecodeError"),
    ("schedule-x", NewEvent("e-short", "ScheduleCreated", b'{"schedule": {"id": "x"}}'), "registry",
     "ScheduleCreated: TypeError"),
    ("schedule-x", NewEvent("e-newer", "ScheduleArchived", b'{"schedule_id": "x"}'), "registry",
     "ScheduleArchived: a type this release does not know"),  # written by a newer release, then rolled back
    (PARTITION_STREAM_PREFIX + "0", NewEvent("e-cut", "Batch", b'{"events":[{"sched'), "matcher", "not a batch of events"),
])
def test_an_unreadable_event_is_one_line_naming_its_stream_and_position(data_dir: Path, stream, event, service,
                                                                        named) -> None:
    """Corrupt, cut short or of another release: `replay` and `rebuild` name the first such event instead of a
    traceback, and `log stats` a record that is not the batch it says."""
    log = SqliteEventLog(data_dir / "events.db", clock=SimulatedClock())
    log.append(stream, [event], ANY_VERSION)
    position = log.head_position()
    log.close()
    where = (f"record {event.id} of stream {stream} at position {position}" if event.type == "Batch"
             else f"stream {stream} version 0 at position {position}: {named}")
    commands = [["replay", service], ["rebuild", service], ["rebuild", "snapshots"]]
    for command in commands + ([["log", "stats"]] if event.type == "Batch" else []):
        result = sluice(*command, "--data-dir", str(data_dir))
        assert result.returncode == 1, (command, result.stderr)
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith("sluice: error: the event log holds") and where in line and named in line, (command, line)


@pytest.mark.parametrize("stream, event, commands, named", [
    ("lineage-run-x", NewEvent("e-lineage", "LineageEventRecorded", b'{"eventType": "START"}'),
     [["replay", "lineage"], ["rebuild", "lineage"]], "LineageEventRecorded: InvalidRunEvent: "),
    ("run-x", NewEvent("e-fields", "RunRequested", b'{"run_id": "x"}'), [["rebuild", "jobs"]],
     "RunRequested: KeyError: 'at'"),
])
def test_an_event_read_beside_the_codec_is_one_line_naming_it_too(data_dir: Path, stream, event, commands, named):
    """Lineage's run events and the fields the jobs view reads are decoded by hand: named as the codec names."""
    log = SqliteEventLog(data_dir / "events.db", clock=SimulatedClock())
    log.append(stream, [event], ANY_VERSION)
    position = log.head_position()
    log.close()
    for command in commands:
        result = sluice(*command, "--data-dir", str(data_dir))
        assert result.returncode == 1, (command, result.stderr)
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith("sluice: error: the event log holds an event this release cannot read: "
                               f"stream {stream} version 0 at position {position}: {named}"), (command, line)
