"""gRPC servers: health checking, reflection, domain errors mapped to status codes, and access
(a bearer token, TLS: sluice.runtime.grpc_security)."""
from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from sluice.runtime import whoami
from sluice.runtime.access import Authenticator
from sluice.domain.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound, ResourceExhausted
from sluice.eventlog.codec import UndecodableEvent
from sluice.eventlog.port import EventLogUnavailable
from sluice.runtime.grpc_decoding import RequestDecoding
from sluice.runtime.grpc_security import GrpcSecurity
from sluice.runtime.health import Health
from sluice.runtime.permissions import Resolver

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GrpcBinding:
    service_name: str                      # full name, e.g. "sluice.v1.ScheduleRegistry"
    add_to_server: Callable[[Any, grpc.aio.Server], None]
    servicer: Any


MAX_DETAILS_CHARS = 1000
MAX_DETAILS_BYTES = 4096
"""A status message as sent is percent-encoded: a byte outside printable ASCII (and `%`) takes three, so a
character up to twelve. Clients drop a status whose metadata passes 8 KiB, at random (gRPC's soft limit;
always past 16 KiB), and report RESOURCE_EXHAUSTED "Stream removed", naming no field: a message is cut at
MAX_DETAILS_CHARS characters or MAX_DETAILS_BYTES bytes encoded, whichever comes first."""


def grpc_errors(method: Callable) -> Callable:
    """Map domain errors to gRPC status codes with a message naming the field."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await method(self, request, context)
        except ResourceExhausted as error:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, _details(error))
        except InvalidArgument as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, _details(error))
        except NotFound as error:
            await context.abort(grpc.StatusCode.NOT_FOUND, _details(error))
        except FailedPrecondition as error:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, _details(error))
        except AlreadyExists as error:
            await context.abort(grpc.StatusCode.ALREADY_EXISTS, _details(error))
        except EventLogUnavailable as error:  # infrastructure, not the request: try again later
            await context.abort(grpc.StatusCode.UNAVAILABLE, _details(error))
        except UndecodableEvent as error:  # a corrupt event, or one of another release: the operator's to see
            log.error("%s: %s: %s", method.__qualname__, UndecodableEvent.WHAT, error)
            await context.abort(grpc.StatusCode.DATA_LOSS, f"{UndecodableEvent.WHAT}: {_details(error)}")

    return wrapper


def _details(error: Exception) -> str:
    return status_details(str(error))


def status_details(text: str) -> str:
    """The message, cut short when it quotes a long value (the field's name comes first)."""
    size = 0
    for index, character in enumerate(text):
        size += 1 if " " <= character <= "~" and character != "%" else 3 * len(character.encode(errors="replace"))
        if index >= MAX_DETAILS_CHARS or size > MAX_DETAILS_BYTES:
            return f"{text[:index]}... ({len(text)} characters)"
    return text


async def start_server(bindings: list[GrpcBinding], host: str = "127.0.0.1", port: int = 0,
                       interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
                       security: GrpcSecurity = GrpcSecurity(),
                       authenticators: Sequence[Authenticator] = (),
                       resolvers: Mapping[str, Resolver] | None = None,
                       readiness: Health | None = None) -> tuple[grpc.aio.Server, int]:
    """`interceptors` see every call, refused ones too (the security's come after them). With
    authorization on, `authenticators` (the services' own, after the policy's and the token's) and
    `resolvers` (a request's namespace from an id) serve the authorization interceptor.
    Every server answers Access.WhoAmI. Health checks say SERVING from the start, or, with `readiness`,
    SERVING while it is ready and NOT_SERVING otherwise (every service and the server, "")."""
    server = grpc.aio.server(interceptors=[*interceptors, RequestDecoding(),
                                          *security.interceptors(authenticators, resolvers)])
    for binding in bindings:
        binding.add_to_server(binding.servicer, server)
    whoami.add_to_server(server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = [*(b.service_name for b in bindings), whoami.SERVICE_NAME]
    reflection.enable_server_reflection([*names, health.SERVICE_NAME, reflection.SERVICE_NAME], server)
    credentials = security.server_credentials()
    address = f"{host}:{port}"
    bound = server.add_insecure_port(address) if credentials is None else server.add_secure_port(address, credentials)
    security.warn_if_exposed(host)
    await server.start()

    async def serving(ready: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if ready else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in ["", *names]:
            await health_servicer.set(name, status)

    await serving(readiness is None or readiness.ready())
    if readiness is not None:
        readiness.listen(serving)
    return server, bound
