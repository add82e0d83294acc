"""`sluice log` and `sluice dlq`: the event log and the dead letters read offline, no server
running, on the SQLite log and the durable in-process bus, and the dead letters on a real Kafka
broker; bad input is one line and a non-zero exit code."""
from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from sluice.bus.inprocess import InProcessBus
from sluice.bus.kafka import KafkaBus
from sluice.bus.port import Record
from sluice.bus.topics import ALL_TOPICS, DEAD_LETTER, PARTITION_NOTIFICATIONS
from sluice.clock import SimulatedClock
from sluice.domain.common import ProgramRef
from sluice.domain.schedules import Schedule, schedule_id_for
from sluice.domain.triggers import PartitionTrigger
from sluice.eventlog.batched import batch
from sluice.eventlog.port import NO_STREAM, StreamAppend
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.runtime.consumer import send_to_dead_letter
from tests.support.kafka import KafkaBroker
from sluice_services.matcher.decisions import partition_stream
from sluice_services.registry.service import RegistryService
from sluice_services.sre import dead_letters

pytestmark = pytest.mark.integration

PROGRAM = ProgramRef("ns", "app", "p")


def sluice(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sluice_services.cli", *args], capture_output=True, text=True, timeout=120)


def one_line_error(result: subprocess.CompletedProcess, text: str) -> None:
    assert result.returncode == 1, (result.stdout, result.stderr)
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("sluice: error:") and text in line and "Traceback" not in result.stderr


@pytest.fixture
def data_dir(tmp_path) -> Path:
    log = SqliteEventLog(tmp_path / "events.db", clock=SimulatedClock())
    registry = RegistryService(log, SimulatedClock())
    for name in ("a", "b"):
        registry.create(Schedule(schedule_id_for(PROGRAM, name), name, PROGRAM, PartitionTrigger("ns", name)))
    registry.enable(schedule_id_for(PROGRAM, "a"))
    log.close()
    return tmp_path


def test_log_stats_tail_show_and_read(data_dir):
    stats = json.loads(sluice("--json", "log", "stats", "--data-dir", str(data_dir)).stdout)
    assert stats["events"] == 3 and stats["categories"] == {"schedule-*": 3}
    assert stats["types"] == {"ScheduleCreated": 2, "ScheduleEnabled": 1}

    tail = sluice("log", "tail", "-n", "2", "--data-dir", str(data_dir))
    header, _, *rows = tail.stdout.splitlines()
    assert header.split()[:5] == ["POSITION", "RECORDED", "STREAM", "VERSION", "TYPE"]
    assert [row.split()[0] for row in rows] == ["2", "3"] and rows[-1].split()[-1] == "ScheduleEnabled"

    stream = f"schedule-{schedule_id_for(PROGRAM, 'a')}"
    shown = json.loads(sluice("--json", "log", "show", stream, "--event-log", f"sqlite://{data_dir}/events.db").stdout)
    assert [e["type"] for e in shown] == ["ScheduleCreated", "ScheduleEnabled"]
    assert shown[0]["data"]["schedule"]["name"] == "a"

    read = json.loads(sluice("--json", "log", "read", "--from", "1", "--limit", "1", "--data-dir", str(data_dir)).stdout)
    assert [(e["position"], e["data"]["schedule"]["name"]) for e in read] == [(2, "b")]


def test_a_schedule_s_batched_matcher_events_are_read_as_its_own_stream(tmp_path):
    log = SqliteEventLog(tmp_path / "events.db", clock=SimulatedClock())
    stream = f"matcher-{schedule_id_for(PROGRAM, 'a')}"
    log.append_batch([StreamAppend(partition_stream(schedule_id_for(PROGRAM, "a")), [batch("b-1", [
        (stream, 0, "ScheduleObserved", b'{"n":0}'), (stream, 1, "JobCreated", b'{"n":1}')])], NO_STREAM)])
    log.close()

    stats = json.loads(sluice("--json", "log", "stats", "--data-dir", str(tmp_path)).stdout)
    assert stats["events"] == 2 and stats["types"] == {"ScheduleObserved": 1, "JobCreated": 1}
    shown = json.loads(sluice("--json", "log", "show", stream, "--data-dir", str(tmp_path)).stdout)
    assert [(e["stream"], e["version"], e["type"], e["data"], e["position"]) for e in shown] == [
        (stream, 0, "ScheduleObserved", {"n": 0}, 1), (stream, 1, "JobCreated", {"n": 1}, 1)]
    read = json.loads(sluice("--json", "log", "read", "--data-dir", str(tmp_path)).stdout)
    assert [e["type"] for e in read] == ["ScheduleObserved", "JobCreated"]


@pytest.mark.parametrize("args, text", [
    (["log", "show", "schedule-nope"], "no stream 'schedule-nope'"),
    (["log", "read", "--from", "99"], "--from: position 99 is outside the log (0 to 3)"),
    (["log", "tail", "-n", "0"], "-n: must be at least 1"),
    (["dlq", "show", "0/7"], "no bus at"),
])
def test_bad_input_is_one_line(data_dir, args, text):
    one_line_error(sluice(*args, "--data-dir", str(data_dir)), text)


def test_an_unreadable_log_or_a_missing_data_dir_is_one_line(tmp_path):
    one_line_error(sluice("log", "stats", "--data-dir", str(tmp_path / "missing")), "no event log at")
    one_line_error(sluice("log", "stats", "--event-log", "postgresql://nobody@127.0.0.1:1/none"), "cannot open the event log")


def test_a_log_written_by_a_later_release_is_one_line(data_dir):
    log = sqlite3.connect(data_dir / "events.db")
    log.execute("PRAGMA user_version = 99")
    log.close()
    one_line_error(sluice("log", "stats", "--data-dir", str(data_dir)), "newer than this release's")


async def dead_letter(bus, payload: bytes) -> None:
    await bus.create_topics(ALL_TOPICS)
    producer = bus.producer()
    record = Record(PARTITION_NOTIFICATIONS, 0, 41, b"partition:ns.a", payload, (("trace", b"t-1"),), 0)
    await send_to_dead_letter(producer, record, "trigger-matcher-lookup", "malformed: not a protobuf Notification")
    await producer.close()
    await bus.close()


async def source_topic(bus) -> list[Record]:
    consumer = bus.consumer("test-source", [PARTITION_NOTIFICATIONS])
    records = []
    for _ in range(20):
        records += await consumer.poll(timeout=0.5)
        if records:
            break
    await consumer.close()
    await bus.close()
    return records


def dead_letter_round_trip(source: list[str], make_bus) -> None:
    asyncio.run(dead_letter(make_bus(), b"\xff poison"))
    (letter,) = json.loads(sluice("--json", "dlq", "list", *source).stdout)
    assert letter["headers"]["reason"] == "malformed: not a protobuf Notification"
    assert letter["headers"]["source-topic"] == PARTITION_NOTIFICATIONS and letter["value_hex"] == b"\xff poison".hex()
    shown = sluice("dlq", "show", letter["id"], *source).stdout
    assert "consumer-group: trigger-matcher-lookup" in shown and b"\xff poison".hex() in shown

    replayed = sluice("dlq", "replay", letter["id"], *source)
    assert replayed.stdout.strip() == f"replayed {letter['id']} to {PARTITION_NOTIFICATIONS}", replayed.stderr
    (again,) = asyncio.run(source_topic(make_bus()))
    assert again.value == b"\xff poison" and again.key == b"partition:ns.a"
    assert dict(again.headers) == {"trace": b"t-1", "sluice-replayed-for": b"trigger-matcher-lookup"}
    one_line_error(sluice("dlq", "replay", letter["id"], *source), f"already replayed: {letter['id']}")
    assert sluice("dlq", "replay", letter["id"], "--force", *source).returncode == 0
    one_line_error(sluice("dlq", "replay", "9/9", *source), "no dead letter '9/9'")


def test_dead_letters_listed_shown_and_replayed_once_on_the_in_process_bus(data_dir):
    dead_letter_round_trip(["--data-dir", str(data_dir)], lambda: InProcessBus(data_dir / "bus.db"))


def test_control_characters_off_the_bus_never_reach_the_terminal(data_dir):
    """A dead letter carries its message's headers and key as a producer wrote them: `list` and `show` escape
    what would drive a terminal (clear the screen, set the clipboard)."""
    async def hostile() -> None:
        bus = InProcessBus(data_dir / "bus.db")
        await bus.create_topics(ALL_TOPICS)
        producer = bus.producer()
        record = Record(PARTITION_NOTIFICATIONS, 0, 7, b"k\x1b[2J", b"v", (("trace", b"\x1b]52;c;Zm9v\x07"),), 0)
        await send_to_dead_letter(producer, record, "trigger-matcher-lookup", "bad \x1b[31mred")
        await producer.close()
        await bus.close()
    asyncio.run(hostile())
    source = ["--data-dir", str(data_dir)]
    listed, shown = sluice("dlq", "list", *source).stdout, sluice("dlq", "show", "0/0", *source).stdout
    assert "\x1b" not in listed + shown and "\x07" not in shown
    assert "bad \\x1b[31mred" in listed
    assert "trace: \\x1b]52;c;Zm9v\\x07" in shown and "key: k\\x1b[2J" in shown


def test_a_dead_letter_naming_no_consumed_topic_is_not_replayed(data_dir):
    """A dead letter's source-topic header says where a replay publishes: one naming no topic Sluice consumes
    (missing, the dead-letter topic itself, any other) is refused in one line and nothing is published."""
    async def letters() -> None:
        bus = InProcessBus(data_dir / "bus.db")
        await bus.create_topics(ALL_TOPICS)
        producer = bus.producer()
        for source in (None, DEAD_LETTER, "elsewhere"):
            headers = [("reason", b"r"), ("consumer-group", b"g")] + ([("source-topic", source.encode())] if source else [])
            await producer.send(DEAD_LETTER, b"v", key=b"k", headers=headers)
        await producer.close()
        await bus.close()

    async def dead_letter_count() -> int:
        bus = InProcessBus(data_dir / "bus.db")
        try:
            return len(await dead_letters.drain(bus, 0.5))
        finally:
            await bus.close()
    asyncio.run(letters())
    source = ["--data-dir", str(data_dir)]
    for letter, named in (("0/0", "''"), ("0/1", repr(DEAD_LETTER)), ("0/2", "'elsewhere'")):
        one_line_error(sluice("dlq", "replay", letter, *source), f"dead letter {letter} names no topic Sluice consumes "
                                                                 f"as its source-topic ({named}): not replayed")
    assert asyncio.run(dead_letter_count()) == 3  # none was published again, to the dead-letter topic either
    assert json.loads(sluice("--json", "log", "show", "dlq-replays", *source).stdout or "[]") == []


@pytest.mark.slow
def test_dead_letters_listed_shown_and_replayed_once_on_kafka(data_dir):
    with KafkaBroker() as kafka:
        dead_letter_round_trip(["--data-dir", str(data_dir), "--bus", f"kafka://{kafka.bootstrap}"],
                               lambda: KafkaBus(kafka.bootstrap))
