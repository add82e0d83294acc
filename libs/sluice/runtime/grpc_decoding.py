"""Request bytes that do not parse as the method's message end INVALID_ARGUMENT, not UNKNOWN.

grpcio parses a request before any handler or interceptor sees it and answers a parse failure
(corrupt wire format, invalid UTF-8 in a string field, nesting past protobuf's depth limit) with
UNKNOWN and the exception's repr. This interceptor hands the handler's own deserializer the raw
bytes inside the call instead, where a failure can be answered as the caller's error."""
from __future__ import annotations

import inspect
from typing import Any, Awaitable, Callable

import grpc


class RequestDecoding(grpc.aio.ServerInterceptor):
    async def intercept_service(self, continuation: Callable[[Any], Awaitable[Any]],
                                handler_call_details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_streaming or handler.request_deserializer is None:
            return handler
        decode = handler.request_deserializer
        method = handler_call_details.method

        async def parsed(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
            try:
                return decode(raw)
            except Exception as error:  # DecodeError, or whatever a custom deserializer raises
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                    f"request: not a valid request of {method} ({error})")

        if handler.unary_unary:
            behavior = handler.unary_unary

            async def unary(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
                return await behavior(await parsed(raw, context), context)

            return grpc.unary_unary_rpc_method_handler(unary, None, handler.response_serializer)

        stream = handler.unary_stream
        if inspect.isasyncgenfunction(stream):
            async def streaming(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
                async for response in stream(await parsed(raw, context), context):
                    yield response
        else:  # a coroutine that writes its responses with context.write
            async def streaming(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
                await stream(await parsed(raw, context), context)

        return grpc.unary_stream_rpc_method_handler(streaming, None, handler.response_serializer)
