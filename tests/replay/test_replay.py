"""Replaying the recorded log (tests/replay/recorded.jsonl, made by record.py) gives identical
state every time: twice on one log, and on a second copy of it; and `sluice replay` shows a
service as it was at any position."""
from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from sluice.clock import SimulatedClock
from sluice.eventlog.port import ANY_VERSION, NewEvent
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.eventlog.truncated import LogUntil, ReadOnlyLog
from sluice_services.cli.replay import service_state

RECORDING = Path(__file__).with_name("recorded.jsonl")
SERVICES = ("registry", "matcher", "checker")


def load(path: Path) -> SqliteEventLog:
    """The recorded events appended in order, each at its recorded time: the same positions and ids."""
    clock = SimulatedClock()
    log = SqliteEventLog(path, clock=clock)
    for line in RECORDING.read_text().splitlines():
        event = json.loads(line)
        clock.set(datetime.fromisoformat(event["recorded_at"]))
        log.append(event["stream"], [NewEvent(event["id"], event["type"], json.dumps(event["data"]).encode(),
                                              event["metadata"])], ANY_VERSION)
    return log


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    first, second = (load(tmp_path_factory.mktemp("replay") / "events.db") for _ in range(2))
    yield first, second
    first.close()
    second.close()


def test_the_recording_loads_with_its_positions(logs):
    recorded = [json.loads(line) for line in RECORDING.read_text().splitlines()]
    events = logs[0].read_all(0, 10_000)
    assert [(e.position, e.id, e.stream, e.version) for e in events] == [
        (r["position"], r["id"], r["stream"], r["version"]) for r in recorded]


@pytest.mark.parametrize("service", SERVICES)
def test_replaying_twice_and_on_a_copy_gives_identical_state(logs, service):
    first, second = logs
    state = service_state(service, first)
    assert state == service_state(service, first) == service_state(service, second)
    assert state, "the recording gives every service something to rebuild"


def test_what_the_recorded_history_must_have_left(logs):
    registry = service_state("registry", logs[0])
    assert sorted((s["name"], s["generation"], s["enabled"]) for s in registry.values()) == [
        ("after_a", 1, False), ("every_two", 2, True), ("hourly", 1, True)]
    matcher = service_state("matcher", logs[0])
    by_name = {s["schedule"]: s for s in matcher.values() if s["schedule"]}
    assert set(by_name) == {"every_two", "hourly", "after_a"}  # join was deleted: forgotten
    assert by_name["after_a"]["pending_job"] is None           # disabled: its pending job discarded
    assert by_name["hourly"]["jobs_created"] == 6               # 5 h 30 of history: 5 fires, and the next job


def test_replay_until_a_position_is_the_state_then_and_cannot_write(logs):
    log = logs[0]
    middle = log.head_position() // 2
    then = service_state("registry", LogUntil(log, middle))
    assert then != service_state("registry", log)
    assert all(s["generation"] == 1 for s in then.values())  # the update comes later
    with pytest.raises(ReadOnlyLog):
        LogUntil(log, middle).append("x", [], ANY_VERSION)


def test_sluice_replay_shows_a_service_at_a_position_and_the_diff_to_the_head(logs, tmp_path):
    url = f"sqlite://{tmp_path}/copy.db"
    load(tmp_path / "copy.db").close()
    run = [sys.executable, "-m", "sluice_services.cli", "--json", "replay", "registry", "--event-log", url]
    created = max(json.loads(line)["position"] for line in RECORDING.read_text().splitlines()
                  if json.loads(line)["type"] == "ScheduleCreated")
    at = json.loads(subprocess.run([*run, "--until", str(created)], capture_output=True, text=True, timeout=60).stdout)
    assert sorted(s["name"] for s in at.values()) == ["after_a", "every_two", "hourly", "join"]
    changes = json.loads(subprocess.run([*run, "--until", str(created), "--diff"], capture_output=True, text=True,
                                        timeout=60).stdout)
    assert {c["at_until"]["name"] for c in changes.values()} == {"after_a", "every_two", "join"}
    assert [c["at_head"] for c in changes.values() if c["at_until"]["name"] == "join"] == [None]
    refused = subprocess.run([*run, "--until", "9999"], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1 and refused.stderr.strip().endswith("is outside the log (0 to 145)")
