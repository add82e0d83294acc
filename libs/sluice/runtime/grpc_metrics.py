"""A gRPC server interceptor counting requests per method and status code, with a latency histogram.

Status codes: OK for a handler that returns, the code it aborted with (context.abort / set_code),
CANCELLED when the call is cancelled, UNKNOWN for any other exception."""
from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any, AsyncIterator, Awaitable, Callable

import grpc

from sluice.runtime.metrics import Registry


class GrpcMetrics:
    def __init__(self, registry: Registry) -> None:
        self.handled = registry.counter(
            "sluice_grpc_server_handled_total", "gRPC requests completed, by method and status code.",
            ("grpc_service", "grpc_method", "grpc_code"))
        self.seconds = registry.histogram(
            "sluice_grpc_server_handling_seconds", "Time to complete a gRPC request, by method.",
            ("grpc_service", "grpc_method"))

    def record(self, full_method: str, code: grpc.StatusCode, seconds: float) -> None:
        service, method = split_method(full_method)
        self.handled.labels(service, method, code.name).inc()
        self.seconds.labels(service, method).observe(seconds)


def split_method(full_method: str) -> tuple[str, str]:
    """"/sluice.v1.ScheduleRegistry/ListSchedules" -> ("sluice.v1.ScheduleRegistry", "ListSchedules")."""
    service, _, method = full_method.lstrip("/").rpartition("/")
    return service or "unknown", method


def status_of(context: grpc.aio.ServicerContext, error: BaseException | None) -> grpc.StatusCode:
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return code
    if isinstance(code, int):  # some grpc versions keep the raw integer value
        return next((c for c in grpc.StatusCode if c.value[0] == code), grpc.StatusCode.UNKNOWN)
    if isinstance(error, (asyncio.CancelledError, GeneratorExit)):
        return grpc.StatusCode.CANCELLED
    return grpc.StatusCode.OK if error is None else grpc.StatusCode.UNKNOWN


class MetricsInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, registry: Registry) -> None:
        self._metrics = GrpcMetrics(registry)

    async def intercept_service(self, continuation: Callable[[Any], Awaitable[Any]],
                                handler_call_details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None:  # unknown method: gRPC answers UNIMPLEMENTED itself
            return None
        return _wrap(handler, lambda context, error, started: self._metrics.record(
            handler_call_details.method, status_of(context, error), time.perf_counter() - started))


Record = Callable[[grpc.aio.ServicerContext, BaseException | None, float], None]


def _wrap(handler: grpc.RpcMethodHandler, record: Record) -> grpc.RpcMethodHandler:
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(_timed_call(handler.unary_unary, record),
                                                   handler.request_deserializer, handler.response_serializer)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(_timed_stream(handler.unary_stream, record),
                                                    handler.request_deserializer, handler.response_serializer)
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(_timed_call(handler.stream_unary, record),
                                                    handler.request_deserializer, handler.response_serializer)
    return grpc.stream_stream_rpc_method_handler(_timed_stream(handler.stream_stream, record),
                                                 handler.request_deserializer, handler.response_serializer)


def _timed_call(behavior: Callable, record: Record) -> Callable:
    async def timed(request_or_iterator: Any, context: grpc.aio.ServicerContext) -> Any:
        started, error = time.perf_counter(), None
        try:
            result = behavior(request_or_iterator, context)
            return await result if inspect.isawaitable(result) else result
        except BaseException as raised:
            error = raised
            raise
        finally:
            record(context, error, started)

    return timed


def _timed_stream(behavior: Callable, record: Record) -> Callable:
    """Server-streaming behaviours are async generators or coroutines that call context.write."""
    if not inspect.isasyncgenfunction(behavior):
        return _timed_call(behavior, record)

    async def timed(request_or_iterator: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        started, error = time.perf_counter(), None
        try:
            async for response in behavior(request_or_iterator, context):
                yield response
        except BaseException as raised:
            error = raised
            raise
        finally:
            record(context, error, started)

    return timed
