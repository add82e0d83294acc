"""gRPC DeadLetters and EventLog on a real `sluice standalone`: a malformed notification put on its
bus is dead-lettered by the matcher, listed (paged, by topic and reason), replayed once (recorded in
the event log, refused a second time unless forced, dead-lettered again as it is still malformed);
the event log's streams listed and read in pages; bad input is INVALID_ARGUMENT naming the field."""
from __future__ import annotations

import asyncio
import json

import grpc
import pytest

from sluice.bus.port import Record
from sluice.bus.topics import DEAD_LETTER, PARTITION_NOTIFICATIONS
from sluice.clock import SimulatedClock
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.v1 import dead_letters_pb2 as dl, dead_letters_pb2_grpc, event_log_pb2 as el, event_log_pb2_grpc
from sluice.v1 import schedules_pb2, schedules_pb2_grpc
from sluice_services.localserver import LocalServer
from sluice_services.sre import dead_letters
from sluice_services.sre.dead_letters_grpc import DeadLetterFollower, DeadLettersServicer
from tests.support.console import dead_letter_poison
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration


def code_of(call) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as raised:
        call()
    return raised.value.code(), raised.value.details()


def test_dead_letters_listed_and_replayed_once(tmp_path):
    with LocalServer(tmp_path / "data") as server, grpc.insecure_channel(server.address) as channel:
        letters = dead_letters_pb2_grpc.DeadLettersStub(channel)
        asyncio.run(dead_letter_poison(server.data_dir, 3))
        listed = eventually(lambda: len(letters.ListDeadLetters(dl.ListDeadLettersRequest()).dead_letters) == 3 and
                          letters.ListDeadLetters(dl.ListDeadLettersRequest()).dead_letters, 30, "three dead letters")
        first = listed[0]
        assert first.source_topic == PARTITION_NOTIFICATIONS and first.value == b"\xff poison 0"
        assert first.reason and first.consumer_group and not first.replayed and first.id == f"0/{first.id.split('/')[1]}"

        page = letters.ListDeadLetters(dl.ListDeadLettersRequest(page_size=2))
        rest = letters.ListDeadLetters(dl.ListDeadLettersRequest(page_size=2, page_token=page.next_page_token))
        assert [d.id for d in page.dead_letters] + [d.id for d in rest.dead_letters] == [d.id for d in listed]
        assert not rest.next_page_token
        reason_word = first.reason.split()[0].upper()
        assert len(letters.ListDeadLetters(dl.ListDeadLettersRequest(reason=reason_word)).dead_letters) == 3
        assert not letters.ListDeadLetters(dl.ListDeadLettersRequest(reason="no such reason")).dead_letters
        assert not letters.ListDeadLetters(dl.ListDeadLettersRequest(topic="sluice.other")).dead_letters

        replayed = letters.ReplayDeadLetter(dl.ReplayDeadLetterRequest(id=first.id)).dead_letter
        assert replayed.id == first.id and replayed.replayed
        code, details = code_of(lambda: letters.ReplayDeadLetter(dl.ReplayDeadLetterRequest(id=first.id)))
        assert code == grpc.StatusCode.FAILED_PRECONDITION and "replayed before" in details
        # still malformed: the matcher dead-letters the replayed message again, a fourth letter
        again = eventually(lambda: [d for d in letters.ListDeadLetters(dl.ListDeadLettersRequest()).dead_letters
                                  if d.value == first.value and d.id != first.id], 30, "the replay dead-lettered again")
        assert not again[0].replayed
        assert [d.replayed for d in letters.ListDeadLetters(dl.ListDeadLettersRequest()).dead_letters[:3]] == [
            True, False, False]
        assert letters.ReplayDeadLetter(dl.ReplayDeadLetterRequest(id=first.id, force=True)).dead_letter.replayed

        log = event_log_pb2_grpc.EventLogStub(channel)
        replays = log.ReadStream(el.ReadStreamRequest(stream="dlq-replays")).events
        assert [json.loads(e.data)["id"] for e in replays] == [first.id, first.id]
        assert replays[0].type == "DeadLetterReplayed"

        for request, field in ((dl.ReplayDeadLetterRequest(), "id"), (dl.ReplayDeadLetterRequest(id="9/9"), None)):
            code, details = code_of(lambda: letters.ReplayDeadLetter(request))
            assert code == (grpc.StatusCode.INVALID_ARGUMENT if field else grpc.StatusCode.NOT_FOUND), details
        code, details = code_of(lambda: letters.ListDeadLetters(dl.ListDeadLettersRequest(page_token="forged")))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("page_token")


class Published:
    def __init__(self) -> None:
        self.sent: list[str] = []

    async def send(self, topic, value, key=None, headers=()) -> None:
        self.sent.append(topic)


class AbortingContext:
    async def abort(self, code, details):
        raise grpc.aio.AbortError(code, details)


async def test_a_dead_letter_naming_no_consumed_topic_is_not_replayed(tmp_path):
    follower, producer = DeadLetterFollower(bus=None), Published()
    follower.records = [Record(DEAD_LETTER, 0, offset, b"k", b"v", headers, 0) for offset, headers in enumerate(
        [(("reason", b"r"),), (("source-topic", DEAD_LETTER.encode()),), (("source-topic", b"elsewhere"),)])]
    log = SqliteEventLog(tmp_path / "events.db", clock=SimulatedClock())
    servicer = DeadLettersServicer(follower, log, producer)
    try:
        for letter in ("0/0", "0/1", "0/2"):
            with pytest.raises(grpc.aio.AbortError) as refused:
                await servicer.ReplayDeadLetter(dl.ReplayDeadLetterRequest(id=letter), AbortingContext())
            code, details = refused.value.args
            assert code == grpc.StatusCode.FAILED_PRECONDITION and f"dead letter {letter} names no topic" in details
        assert producer.sent == [] and dead_letters.replayed_ids(log) == set()
    finally:
        log.close()


def test_event_log_streams_listed_and_read_in_pages(tmp_path):
    with LocalServer(tmp_path / "data") as server, grpc.insecure_channel(server.address) as channel:
        registry = schedules_pb2_grpc.ScheduleRegistryStub(channel)
        for name in ("a", "b", "c"):
            created = registry.CreateSchedule(schedules_pb2.CreateScheduleRequest(schedule=schedules_pb2.Schedule(
                name=name, program={"namespace": "ns", "app": "app", "program": "p"},
                trigger={"time": {"cron": "0 * * * *", "zone": "UTC"}})))
        for _ in range(3):
            registry.EnableSchedule(schedules_pb2.EnableScheduleRequest(id=created.id))
            registry.DisableSchedule(schedules_pb2.DisableScheduleRequest(id=created.id))
        log = event_log_pb2_grpc.EventLogStub(channel)
        first = log.ListStreams(el.ListStreamsRequest(prefix="schedule-", page_size=2))
        second = log.ListStreams(el.ListStreamsRequest(prefix="schedule-", page_size=2, page_token=first.next_page_token))
        streams = list(first.streams) + list(second.streams)
        assert len(streams) == 3 and not second.next_page_token and [s.name for s in streams] == sorted(s.name for s in streams)
        counts = {s.name: s.events for s in streams}
        assert counts[f"schedule-{created.id}"] == 7 and sorted(counts.values()) == [1, 1, 7]

        page = log.ReadStream(el.ReadStreamRequest(stream=f"schedule-{created.id}", page_size=4))
        assert [e.version for e in page.events] == [0, 1, 2, 3] and page.next_version == 4
        assert page.events[0].type == "ScheduleCreated" and json.loads(page.events[0].data)
        assert page.events[0].recorded_at.seconds > 0 and page.events[1].position > page.events[0].position
        rest = log.ReadStream(el.ReadStreamRequest(stream=f"schedule-{created.id}", from_version=4, page_size=4))
        assert [e.version for e in rest.events] == [4, 5, 6] and rest.next_version == -1

        for request, field in ((el.ReadStreamRequest(), "stream"), (el.ReadStreamRequest(stream="x", from_version=-1), "from_version"),
                               (el.ReadStreamRequest(stream="x", page_size=-1), "page_size")):
            code, details = code_of(lambda: log.ReadStream(request))
            assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith(field), details
        code, _ = code_of(lambda: log.ReadStream(el.ReadStreamRequest(stream="no-such-stream")))
        assert code == grpc.StatusCode.NOT_FOUND
        code, details = code_of(lambda: log.ListStreams(el.ListStreamsRequest(page_token="forged")))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("page_token")
