"""The KurrentDB adapter's own logic, on the fake client of test_kurrentdb_fake.py (no server here).

The contract suite's non-durable part runs on the fake twice: with a server that takes a resent
append as an idempotent retry and with one that refuses it. This checks the adapter's translation,
planning and error handling, not KurrentDB: tests/integration/eventlog/test_kurrentdb.py runs the
whole contract against a real server when SLUICE_KURRENTDB_URL is set.
"""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from sluice.clock import Clock, SimulatedClock
from sluice.eventlog import (
    ANY_VERSION,
    NO_STREAM,
    Checkpoint,
    DuplicateEventId,
    EventLog,
    NewEvent,
    StreamAppend,
    WrongExpectedVersion,
)
from sluice.eventlog.kurrentdb import EventLogClosed, KurrentEventLog

from tests.integration.eventlog.contract import EventLogContract, everything, new_event, new_events, take
from tests.unit.test_kurrentdb_fake import FakeKurrentServer

PREFIX = "app-"


def _server_with_neighbours(idempotent: bool = True) -> FakeKurrentServer:
    """A server that also holds another application's streams under another prefix."""
    server = FakeKurrentServer(idempotent=idempotent)
    KurrentEventLog(server.client(), prefix="other-").append("s", new_events(2), NO_STREAM,
                                                            checkpoints=[Checkpoint("bus", 1)])
    return server


class TestKurrentEventLogOnFakeClient(EventLogContract):
    idempotent = True

    def make_log(self, tmp_path: Path, clock: Clock) -> EventLog:
        return KurrentEventLog(_server_with_neighbours(self.idempotent).client(), prefix=PREFIX, clock=clock)


class TestKurrentEventLogOnFakeClientWithoutIdempotentResends(TestKurrentEventLogOnFakeClient):
    idempotent = False


@pytest.fixture(params=[True, False], ids=["idempotent", "refusing"])
def server(request: pytest.FixtureRequest) -> FakeKurrentServer:
    return _server_with_neighbours(idempotent=request.param)


@pytest.fixture
def log(server: FakeKurrentServer):
    log = KurrentEventLog(server.client(), prefix=PREFIX, clock=SimulatedClock())
    yield log
    log.close()


# -- what is stored --------------------------------------------------------------------------------


def test_ids_and_checkpoints_are_stored_in_internal_streams_the_log_never_shows(
        server: FakeKurrentServer, log: KurrentEventLog) -> None:
    events = new_events(2)
    log.append("s", events, NO_STREAM, checkpoints=[Checkpoint("bus", 7)])

    mine = [e for e in server.all() if e.stream_name.startswith(PREFIX)]
    assert [e.stream_name for e in mine] == [
        "app-s", "app-s", f"app-@id-{events[0].id}", f"app-@id-{events[1].id}", "app-@checkpoint-bus"]
    assert json.loads(mine[2].data) == {"stream": "s"}
    assert [e.stream for e in log.read_all()] == ["s", "s"]
    assert log.head_position() == mine[1].commit_position


def test_metadata_keeps_the_clock_time_and_escapes_the_users_reserved_keys(
        server: FakeKurrentServer, log: KurrentEventLog) -> None:
    metadata = {"$schema.name": "mine", "~recorded_at": "mine too", "": "empty", "plain": "x"}
    log.append("s", [NewEvent(id=new_event().id, type="T", data=b"\x00", metadata=metadata)], NO_STREAM)
    (stored,) = server.stream("app-s")
    assert stored.content_type == "application/octet-stream"
    assert json.loads(stored.metadata)["~recorded_at"] == "2026-01-01T00:00:00+00:00"
    assert dict(log.read_stream("s")[0].metadata) == metadata


def test_positions_are_commit_positions_increasing_with_gaps(log: KurrentEventLog) -> None:
    log.append("s", new_events(3), NO_STREAM)
    positions = [e.position for e in log.read_all()]
    assert all(q > p + 1 for p, q in zip(positions, positions[1:]))  # callers may only compare them


def test_read_all_after_a_position_that_is_no_events(log: KurrentEventLog) -> None:
    log.append("s", new_events(5), NO_STREAM)
    events = log.read_all()
    assert log.read_all(after=events[1].position + 1) == events[2:]
    assert log.read_all(after=events[1].position - 1, limit=2) == events[1:3]
    assert log.read_all(after=1) == events
    assert log.read_all(after=log.head_position() + 1) == []


def test_ids_that_are_not_uuids_round_trip_and_stay_unique(log: KurrentEventLog) -> None:
    log.append("s", [NewEvent(id="run-1/step 0", type="T", data=b"{}")], NO_STREAM)
    assert log.read_all()[0].id == "run-1/step 0"
    with pytest.raises(DuplicateEventId) as raised:
        log.append("t", [NewEvent(id="run-1/step 0", type="T", data=b"{}")], NO_STREAM)
    assert raised.value.event_id == "run-1/step 0"


@pytest.mark.parametrize("name", ["", "@id-x", "@checkpoint-bus", "$settings"])
def test_reserved_stream_names_are_refused_before_anything_is_written(log: KurrentEventLog, name: str) -> None:
    head = log.head_position()
    with pytest.raises(ValueError, match="must be non-empty and not start with"):
        log.append_batch([StreamAppend("ok", new_events(1), NO_STREAM), StreamAppend(name, new_events(1), ANY_VERSION)])
    assert log.head_position() == head and log.stream_version("ok") == NO_STREAM


def test_prefixes_isolate_logs_sharing_a_server(server: FakeKurrentServer) -> None:
    other = KurrentEventLog(server.client(), prefix="other-")
    assert [(e.stream, e.version) for e in other.read_all()] == [("s", 0), ("s", 1)]
    assert other.read_checkpoint("bus") == 1
    mine = KurrentEventLog(server.client(), prefix=PREFIX)
    assert (mine.head_position(), mine.read_all(), mine.read_checkpoint("bus")) == (0, [], None)


def test_without_a_prefix_the_log_hides_system_and_internal_streams() -> None:
    log = KurrentEventLog(FakeKurrentServer().client())  # the fake starts with "$settings" and "$stats-..." events
    log.append("s", new_events(1), NO_STREAM, checkpoints=[Checkpoint("bus", 1)])
    assert [e.stream for e in log.read_all()] == ["s"]


# -- planning: merged streams, ANY, races ---------------------------------------------------------------


def test_a_stream_named_twice_in_a_batch_is_appended_in_order(log: KurrentEventLog) -> None:
    first, second = new_events(2), new_events(1)
    assert log.append_batch([StreamAppend("s", first, NO_STREAM), StreamAppend("t", new_events(1), NO_STREAM),
                             StreamAppend("s", second, 1)]) == [1, 0, 2]
    assert [e.id for e in log.read_stream("s")] == [e.id for e in first + second]
    assert log.append_batch([StreamAppend("s", new_events(1), ANY_VERSION), StreamAppend("s", new_events(1), 3)]) \
        == [3, 4]


def test_contradicting_expectations_for_one_stream_write_nothing(log: KurrentEventLog) -> None:
    log.append("s", new_events(1), NO_STREAM)
    with pytest.raises(WrongExpectedVersion) as raised:
        log.append_batch([StreamAppend("s", new_events(2), 0), StreamAppend("s", new_events(1), 1)])
    assert (raised.value.stream, raised.value.expected, raised.value.actual) == ("s", 1, 2)
    with pytest.raises(WrongExpectedVersion) as raised:
        log.append_batch([StreamAppend("s", new_events(2), 5), StreamAppend("s", new_events(1), 7)])
    assert (raised.value.stream, raised.value.expected, raised.value.actual) == ("s", 5, 0)
    assert log.stream_version("s") == 0


def test_any_version_is_retried_when_another_writer_gets_in_between(
        server: FakeKurrentServer, log: KurrentEventLog) -> None:
    log.append("s", new_events(1), NO_STREAM)
    rival = KurrentEventLog(server.client(), prefix=PREFIX)
    server.before_next_append = lambda: rival.append("s", new_events(1), 0)
    assert log.append("s", new_events(2), ANY_VERSION) == 3
    assert [e.version for e in log.read_stream("s")] == [0, 1, 2, 3]


def test_an_exact_version_lost_to_another_writer_is_a_conflict(server: FakeKurrentServer, log: KurrentEventLog) -> None:
    log.append("s", new_events(1), NO_STREAM)
    rival = KurrentEventLog(server.client(), prefix=PREFIX)
    server.before_next_append = lambda: rival.append("s", new_events(2), 0)
    with pytest.raises(WrongExpectedVersion) as raised:
        log.append("s", new_events(1), 0, checkpoints=[Checkpoint("bus", 3)])
    assert (raised.value.expected, raised.value.actual) == (0, 2)
    assert log.read_checkpoint("bus") is None


@pytest.mark.parametrize("expected", [NO_STREAM, ANY_VERSION])
def test_a_resent_append_whose_first_try_committed_is_a_success(
        server: FakeKurrentServer, log: KurrentEventLog, expected: int) -> None:
    server.resend_next_append = True  # kurrentdbclient resends once after a lost reply
    assert log.append("s", new_events(2), expected, checkpoints=[Checkpoint("bus", 4)]) == 1
    assert [e.version for e in log.read_stream("s")] == [0, 1]
    assert log.read_checkpoint("bus") == 4


def test_duplicate_ids_of_a_batch_are_refused_before_sending(log: KurrentEventLog) -> None:
    event = new_event()
    with pytest.raises(DuplicateEventId):
        log.append_batch([StreamAppend("a", [event], NO_STREAM), StreamAppend("b", [event], NO_STREAM)])
    assert log.head_position() == 0


def test_a_conflict_is_reported_before_a_duplicate_id(log: KurrentEventLog) -> None:
    original = new_event()
    log.append("a", [original], NO_STREAM)
    with pytest.raises(WrongExpectedVersion):
        log.append("a", [new_event(), original], NO_STREAM)


# -- instances and lifecycle ------------------------------------------------------------------------


async def test_instances_on_one_server_see_each_others_appends(server: FakeKurrentServer) -> None:
    reader = KurrentEventLog(server.client(), prefix=PREFIX, poll_interval=0.01)
    writer = KurrentEventLog(server.client(), prefix=PREFIX)
    try:
        subscription = reader.subscribe()
        writer.append("a", new_events(2), NO_STREAM, checkpoints=[Checkpoint("bus", 2)])
        assert [e.version for e in await take(subscription, 2)] == [0, 1]
        assert reader.read_checkpoint("bus") == 2 and everything(reader) == everything(writer)
    finally:
        reader.close()
        writer.close()


async def test_a_closed_log_refuses_calls_and_ends_its_subscriptions(log: KurrentEventLog) -> None:
    log.append("a", new_events(1), NO_STREAM)
    subscription = log.subscribe()
    assert len(await take(subscription, 1)) == 1
    waiting = asyncio.ensure_future(anext(subscription))
    await asyncio.sleep(0.02)
    log.close()
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(waiting, 1.0)
    for call in (lambda: log.read_all(), lambda: log.append("a", new_events(1), 0), lambda: log.stream_version("a")):
        with pytest.raises(EventLogClosed):
            call()
