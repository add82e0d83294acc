"""Request bytes that are not the method's message end INVALID_ARGUMENT naming the request, on
every server (grpcio itself answered UNKNOWN with the parser's exception), and well-formed calls,
streaming ones included, are served as before."""
from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from sluice.runtime.grpc_server import start_server

pytestmark = pytest.mark.integration

HEALTH_CHECK = "/grpc.health.v1.Health/Check"


@pytest.fixture
async def channel():
    server, port = await start_server([])
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield channel
    await server.stop(None)


@pytest.mark.parametrize("raw", [
    b"\x00",                      # corrupt wire format
    b"\x0a\x03\xed\xa0\x80",      # field 1 (a string) holding a lone surrogate: invalid UTF-8
    b"\x0a\x10abc",               # a length past the end
])
async def test_bytes_that_do_not_parse_are_invalid_argument(channel, raw):
    call = channel.unary_unary(HEALTH_CHECK, request_serializer=None, response_deserializer=None)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call(raw, timeout=5)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT, raised.value
    assert raised.value.details().startswith(f"request: not a valid request of {HEALTH_CHECK}")


async def test_well_formed_unary_and_streaming_calls_are_served(channel):
    stub = health_pb2_grpc.HealthStub(channel)
    assert (await stub.Check(health_pb2.HealthCheckRequest(), timeout=5)).status == \
        health_pb2.HealthCheckResponse.SERVING
    watch = stub.Watch(health_pb2.HealthCheckRequest(), timeout=5)
    assert (await watch.read()).status == health_pb2.HealthCheckResponse.SERVING
    watch.cancel()
