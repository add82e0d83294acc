"""Who may call a server's gRPC API: a bearer token, and TLS.

With a token, every call must carry the metadata `authorization: Bearer <token>`, except health
checking and reflection: probes (Kubernetes, grpc_health_probe) and grpcurl's discovery need no
secret, and neither reveals any data. A call without it ends UNAUTHENTICATED with a message saying
what to send. With a certificate and its key the server speaks only TLS, so the token does not
cross the network in clear text; with a client CA as well, only to callers presenting a
certificate that CA signed (mutual TLS; health probes then need one too)."""
from __future__ import annotations

import hmac
import ipaddress
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable

import grpc

log = logging.getLogger(__name__)

AUTHORIZATION = "authorization"
OPEN_METHODS = ("/grpc.health.v1.Health/", "/grpc.reflection.")
"""Method prefixes answered without a token."""
SEND_TOKEN = "send the metadata 'authorization: Bearer <token>' (sluice --token, or SLUICE_TOKEN)"


@dataclass(frozen=True)
class GrpcSecurity:
    token: str = ""
    """Bearer token every call must carry; empty: none asked for."""
    tls_cert: Path | None = None
    """PEM certificate chain the server presents; with tls_key. None: plaintext."""
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    """PEM certificate of the CA whose client certificates the server requires; None: none asked for."""

    def server_credentials(self) -> grpc.ServerCredentials | None:
        if self.tls_cert is None or self.tls_key is None:
            return None
        client_ca = self.tls_client_ca.read_bytes() if self.tls_client_ca else None
        return grpc.ssl_server_credentials([(self.tls_key.read_bytes(), self.tls_cert.read_bytes())],
                                           root_certificates=client_ca, require_client_auth=client_ca is not None)

    def interceptors(self) -> list[grpc.aio.ServerInterceptor]:
        return [BearerTokenAuth(self.token)] if self.token else []

    def warn_if_exposed(self, host: str) -> None:
        """A token sent in clear text to an address other machines can reach is readable on the way."""
        if self.token and self.tls_cert is None and not _loopback(host):
            log.warning("gRPC on %s takes a bearer token over plaintext: serve TLS (--tls-cert, --tls-key) "
                        "when other machines reach it", host)


class BearerTokenAuth(grpc.aio.ServerInterceptor):
    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()

    async def intercept_service(self, continuation: Callable[[Any], Awaitable[Any]],
                                handler_call_details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None or handler_call_details.method.startswith(OPEN_METHODS):
            return handler
        refusal = self._refusal(handler_call_details.invocation_metadata or ())
        return handler if refusal is None else _refusing(handler, refusal)

    def _refusal(self, metadata: tuple[tuple[str, str | bytes], ...]) -> str | None:
        presented = next((value for key, value in metadata if key == AUTHORIZATION), None)
        if presented is None:
            return f"no bearer token: {SEND_TOKEN}"
        if isinstance(presented, str):
            presented = presented.encode()
        if not hmac.compare_digest(presented, self._expected):
            return f"the bearer token in 'authorization' is not this server's: {SEND_TOKEN}"
        return None


def _refusing(handler: grpc.RpcMethodHandler, message: str) -> grpc.RpcMethodHandler:
    """A handler of the same kind as `handler` that only ends the call UNAUTHENTICATED."""
    async def refuse(request_or_iterator: Any, context: grpc.aio.ServicerContext) -> None:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    kinds = ((handler.unary_unary, grpc.unary_unary_rpc_method_handler),
             (handler.unary_stream, grpc.unary_stream_rpc_method_handler),
             (handler.stream_unary, grpc.stream_unary_rpc_method_handler))
    make = next((make for behavior, make in kinds if behavior), grpc.stream_stream_rpc_method_handler)
    return make(refuse, handler.request_deserializer, handler.response_serializer)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
