"""services/ingest/bridge.py with fakes: refusals dead-lettered with the reason, outages retried."""
from __future__ import annotations

import json

import grpc

from sluice_services.ingest.bridge import Backoff, Bridge, Source
from sluice_services.ingest.mapping import parse_route

ROUTE = parse_route({"bucket": "raw", "prefix": "", "pattern": "date={date}/_SUCCESS", "namespace": "ns",
                     "dataset": "ds"})
SOURCE = Source("objects", 0, 41, "sluice-ingest")


def s3_message(key: str) -> bytes:
    return json.dumps({"Records": [{"eventName": "ObjectCreated:Put", "eventTime": "2024-03-01T00:00:00Z",
                                    "s3": {"bucket": {"name": "raw"},
                                           "object": {"key": key, "size": 3, "sequencer": "01"}}}]}).encode()


class Refusal(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


class FakeServer:
    def __init__(self, *failures: Refusal) -> None:
        self.failures = list(failures)
        self.published = []

    async def __call__(self, notification) -> None:
        if self.failures:
            raise self.failures.pop(0)
        self.published.append(notification)


class FakeDeadLetters(list):
    async def __call__(self, value, key, headers) -> None:
        self.append((value, key, dict(headers)))


def bridge(server, letters, slept):
    async def sleep(seconds: float) -> None:
        slept.append(seconds)
    return Bridge([ROUTE], server, letters, backoff=Backoff(first=0.5, factor=2, cap=2), sleep=sleep)


async def test_an_unavailable_server_is_retried_with_capped_backoff_then_published_not_dead_lettered():
    outage = [Refusal(grpc.StatusCode.UNAVAILABLE, "connection refused")] * 4
    server, letters, slept = FakeServer(*outage, Refusal(grpc.StatusCode.DEADLINE_EXCEEDED, "slow")), FakeDeadLetters(), []
    subject = bridge(server, letters, slept)
    await subject.handle(s3_message("date=2024-03-01/_SUCCESS"), b"k", SOURCE)
    assert slept == [0.5, 1.0, 2.0, 2.0, 2.0]
    assert len(server.published) == 1 and letters == []
    assert subject.counts == {"retries": 5, "published": 1}


async def test_refusals_by_the_server_are_dead_lettered_with_code_and_details():
    for code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.PERMISSION_DENIED):
        server, letters, slept = FakeServer(Refusal(code, "token:ingest lacks notifications.publish")), FakeDeadLetters(), []
        value = s3_message("date=2024-03-01/_SUCCESS")
        await bridge(server, letters, slept).handle(value, b"k", SOURCE)
        [(sent, key, headers)] = letters
        assert (sent, key, slept, server.published) == (value, b"k", [], [])
        assert headers == {"reason": f"refused: {code.name}: token:ingest lacks notifications.publish".encode(),
                           "source-topic": b"objects", "source-partition": b"0", "source-offset": b"41",
                           "consumer-group": b"sluice-ingest", "record": b"0"}


async def test_unparsable_and_unmatched_messages_are_dead_lettered_without_calling_the_server():
    server, letters, slept = FakeServer(), FakeDeadLetters(), []
    subject = bridge(server, letters, slept)
    await subject.handle(b"{oops", None, SOURCE)
    await subject.handle(s3_message("elsewhere/_SUCCESS"), None, SOURCE)
    await subject.handle(s3_message("date=2024-03-01/part-0.csv"), None, SOURCE)  # not the marker: ignored
    assert [headers["reason"].split(b":")[0] for _, _, headers in letters] == [b"malformed", b"no route"]
    assert server.published == [] and subject.counts == {"dead_lettered": 2, "ignored": 1}
