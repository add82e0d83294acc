"""Access.WhoAmI, served by every server: the principal the server takes the caller for, and its grants."""
from __future__ import annotations

from typing import Any

from sluice.runtime.access import ANY_NAMESPACE, Grant, Principal, Role
from sluice.runtime.grpc_security import CALLER
from sluice.v1 import access_pb2, access_pb2_grpc

SERVICE_NAME = access_pb2.DESCRIPTOR.services_by_name["Access"].full_name
_EVERYTHING = Principal("anonymous", (Grant(Role.ADMIN, ANY_NAMESPACE),))
"""Authorization off: every caller may do everything."""


class AccessServicer(access_pb2_grpc.AccessServicer):
    async def WhoAmI(self, request: Any, context: Any) -> access_pb2.WhoAmIResponse:
        principal = CALLER.get()
        return whoami_response(principal or _EVERYTHING, principal is not None)


def whoami_response(principal: Principal, authorization: bool) -> access_pb2.WhoAmIResponse:
    return access_pb2.WhoAmIResponse(principal=principal.name, authorization=authorization, grants=[
        access_pb2.AccessGrant(role=g.role.value, namespace=g.namespace, datasets=sorted(g.datasets))
        for g in principal.grants])


def add_to_server(server: Any) -> None:
    access_pb2_grpc.add_AccessServicer_to_server(AccessServicer(), server)
