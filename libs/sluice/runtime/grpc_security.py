"""Who may call a server's gRPC API: a bearer token or a policy file's principals, and TLS.

With a policy (--auth-policy) or a token, one interceptor authenticates every call and authorizes it
against the permission table (sluice.runtime.permissions): PERMISSION_DENIED names what is lacking.

With a token, every call must carry the metadata `authorization: Bearer <token>`, except health
checking and reflection: probes (Kubernetes, grpc_health_probe) and grpcurl's discovery need no
secret, and neither reveals any data. A call without it ends UNAUTHENTICATED with a message saying
what to send. With a certificate and its key the server speaks only TLS, so the token does not
cross the network in clear text; with a client CA as well, only to callers presenting a
certificate that CA signed (mutual TLS; health probes then need one too)."""
from __future__ import annotations

import ipaddress
import logging
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Mapping, Sequence

import grpc

from sluice.runtime.access import Authenticator, Principal
from sluice.runtime.auth_policy import server_token
from sluice.runtime.authorization import Authorizer, bearer_of, may_read
from sluice.runtime.permissions import GRPC_RULES, Resolver, Rule

log = logging.getLogger(__name__)

AUTHORIZATION = "authorization"
OPEN_METHODS = ("/grpc.health.v1.Health/", "/grpc.reflection.")
"""Method prefixes answered without a token."""
CALLER: ContextVar[Principal | None] = ContextVar("sluice_caller", default=None)
"""The principal of the call being handled (Access.WhoAmI); None when authorization is off."""
SEND_TOKEN = "send the metadata 'authorization: Bearer <token>' (sluice --token, or SLUICE_TOKEN)"


@dataclass(frozen=True)
class GrpcSecurity:
    token: str = field(default="", repr=False)
    """Bearer token every call must carry; empty: none asked for."""
    tls_cert: Path | None = None
    """PEM certificate chain the server presents; with tls_key. None: plaintext."""
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    """PEM certificate of the CA whose client certificates the server requires; None: none asked for."""
    policy: Authenticator | None = None
    """The policy file's principals (sluice.runtime.auth_policy); None: only the token, if any."""
    insecure: bool = False
    """Serving beyond loopback without authentication was asked for (--insecure)."""

    @property
    def enforcing(self) -> bool:
        """Authorization is on: a token or a policy. Off, every call is allowed (loopback's default)."""
        return bool(self.token) or self.policy is not None

    def authorizer(self, authenticators: Sequence[Authenticator] = (),
                   resolvers: Mapping[str, Resolver] | None = None) -> Authorizer | None:
        """The policy's, the token's and then `authenticators`' principals; None when not enforcing."""
        if not self.enforcing:
            return None
        own = [*([self.policy] if self.policy is not None else []), *([server_token(self.token)] if self.token else [])]
        return Authorizer([*own, *authenticators], dict(resolvers or {}))

    def authenticated(self) -> bool:
        """Callers must prove who they are: a token, a policy or client certificates."""
        return self.enforcing or self.tls_client_ca is not None

    def server_credentials(self) -> grpc.ServerCredentials | None:
        if self.tls_cert is None or self.tls_key is None:
            return None
        client_ca = self.tls_client_ca.read_bytes() if self.tls_client_ca else None
        return grpc.ssl_server_credentials([(self.tls_key.read_bytes(), self.tls_cert.read_bytes())],
                                           root_certificates=client_ca, require_client_auth=client_ca is not None)

    def interceptors(self, authenticators: Sequence[Authenticator] = (),
                     resolvers: Mapping[str, Resolver] | None = None) -> list[grpc.aio.ServerInterceptor]:
        authorizer = self.authorizer(authenticators, resolvers)
        return [AuthorizationInterceptor(authorizer)] if authorizer is not None else []

    def warn_if_exposed(self, host: str) -> None:
        """A token sent in clear text to an address other machines can reach is readable on the way."""
        if self.enforcing and self.tls_cert is None and not loopback(host):
            log.warning("gRPC on %s takes a bearer token over plaintext: serve TLS (--tls-cert, --tls-key) "
                        "when other machines reach it", host)


class AuthorizationInterceptor(grpc.aio.ServerInterceptor):
    """Every call but health checking and reflection: who the caller is (UNAUTHENTICATED when no
    authenticator knows its credentials), and whether its grants allow the method on the request's
    namespace and dataset (PERMISSION_DENIED naming the permission), from the permission table.
    The check wraps the handler, so it sees the deserialized request."""

    def __init__(self, authorizer: Authorizer) -> None:
        self._authorizer = authorizer

    async def intercept_service(self, continuation: Callable[[Any], Awaitable[Any]],
                                handler_call_details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method.startswith(OPEN_METHODS):
            return handler
        metadata = handler_call_details.invocation_metadata or ()
        header = next((value for key, value in metadata if key == AUTHORIZATION), None)
        if isinstance(header, bytes):
            header = header.decode("utf-8", "replace")
        rule = GRPC_RULES.get(method)
        denied = grpc.StatusCode.PERMISSION_DENIED
        if rule is None:  # a method without a row is refused, not let through
            return _refusing(handler, f"{method} has no entry in the permission table", denied)
        if not (handler.unary_unary or handler.unary_stream):
            return _refusing(handler, f"{method}: streamed requests are not authorized", denied)
        return _checked(handler, self._authorizer, rule, header)


def _checked(handler: grpc.RpcMethodHandler, authorizer: Authorizer, rule: Rule, header: str | None) -> Any:
    bearer, presented = bearer_of(header)

    async def check(request: Any, context: grpc.aio.ServicerContext) -> Principal:
        principal = authorizer.authenticate(bearer, _peer_subject(context))
        if principal is None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, _unauthenticated(authorizer, bearer, presented))
        refusal = await authorizer.check(principal, rule, request)
        if refusal is not None:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, refusal.message)
        return principal

    def answered(response: Any, principal: Principal) -> Any:
        if rule.filter is not None and rule.permission is not None:
            rule.filter(response, lambda ns, ds: may_read(principal, rule.permission, ns, ds))
        return response

    if handler.unary_unary:
        behavior = handler.unary_unary

        async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            principal = await check(request, context)
            token = CALLER.set(principal)
            try:
                return answered(await behavior(request, context), principal)
            finally:
                CALLER.reset(token)
        return grpc.unary_unary_rpc_method_handler(unary, handler.request_deserializer, handler.response_serializer)

    streaming = handler.unary_stream

    async def stream(request: Any, context: grpc.aio.ServicerContext) -> Any:
        principal = await check(request, context)
        token = CALLER.set(principal)
        try:
            async for response in streaming(request, context):
                yield answered(response, principal)
        finally:
            CALLER.reset(token)
    return grpc.unary_stream_rpc_method_handler(stream, handler.request_deserializer, handler.response_serializer)


def _unauthenticated(authorizer: Authorizer, bearer: str | None, presented: bool) -> str:
    if not presented:
        return f"no bearer token: {SEND_TOKEN}"
    return authorizer.refusal(bearer) or f"the bearer token in 'authorization' is not this server's: {SEND_TOKEN}"


def _peer_subject(context: grpc.aio.ServicerContext) -> str | None:
    """The client certificate's subject (RFC 2253, e.g. "CN=ingest"), when the call came over mutual TLS."""
    subjects = context.auth_context().get("x509_subject") or []
    return subjects[0].decode("utf-8", "replace") if subjects else None


def _refusing(handler: grpc.RpcMethodHandler, message: str, code: grpc.StatusCode) -> grpc.RpcMethodHandler:
    """A handler of the same kind as `handler` that only ends the call with `code`."""
    async def refuse(request_or_iterator: Any, context: grpc.aio.ServicerContext) -> None:
        await context.abort(code, message)

    kinds = ((handler.unary_unary, grpc.unary_unary_rpc_method_handler),
             (handler.unary_stream, grpc.unary_stream_rpc_method_handler),
             (handler.stream_unary, grpc.stream_unary_rpc_method_handler))
    make = next((make for behavior, make in kinds if behavior), grpc.stream_stream_rpc_method_handler)
    return make(refuse, handler.request_deserializer, handler.response_serializer)


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
