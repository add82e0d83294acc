"""The console's only way to Sluice: the services' gRPC APIs, through sluice.client.SluiceClient's
channels, every call carrying the signed-in user's bearer token (so each server's authorization
decides, PERMISSION_DENIED included). The same code serves `sluice standalone --web-port` (every API
on the one server) and `sluice serve web` (each API on its own service's address)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from sluice.client import SluiceClient
from sluice.runtime.access import ANY_NAMESPACE, Role
from sluice.runtime.permissions import ROLE_PERMISSIONS
from sluice.v1 import (
    access_pb2,
    access_pb2_grpc,
    alerts_pb2_grpc,
    datasets_pb2_grpc,
    dead_letters_pb2_grpc,
    event_log_pb2_grpc,
)
from sluice_services.web.options import APIS

TIMEOUT = 10.0


@dataclass(frozen=True)
class Identity:
    """Who the servers take the user for (Access.WhoAmI) and what that lets the console offer."""
    principal: str
    authorization: bool
    grants: tuple[access_pb2.AccessGrant, ...] = field(default=())

    def may(self, permission: str, namespace: str) -> bool:
        """Whether a grant gives `permission` on `namespace` (a hint for showing actions; the server decides)."""
        if not self.authorization:
            return True
        for grant in self.grants:
            try:
                role = Role(grant.role)
            except ValueError:
                continue
            if grant.namespace in (namespace, ANY_NAMESPACE) and permission in ROLE_PERMISSIONS.get(role, ()):
                return True
        return False


class ConsoleApi:
    """One SluiceClient (channel) per distinct address; stubs per API; `call` adds the user's token."""

    def __init__(self, addresses: Mapping[str, str], **client_options: Any) -> None:
        missing = [api for api in APIS if not addresses.get(api)]
        if missing:
            raise ValueError(f"no address for {', '.join(missing)}")
        self.addresses = dict(addresses)
        clients: dict[str, SluiceClient] = {}
        for address in set(addresses.values()):
            clients[address] = SluiceClient(address, TIMEOUT, token="", **client_options)
        self._clients = clients
        registry, checker = clients[addresses["registry"]], clients[addresses["checker"]]
        launcher, lineage = clients[addresses["launcher"]], clients[addresses["lineage"]]
        self._stubs = {
            "ScheduleRegistry": registry.schedules,
            "Access": access_pb2_grpc.AccessStub(registry.channel),
            "DeadLetters": dead_letters_pb2_grpc.DeadLettersStub(registry.channel),
            "EventLog": event_log_pb2_grpc.EventLogStub(registry.channel),
            "Jobs": checker.jobs,
            "Runs": launcher.runs,
            "Partitions": datasets_pb2_grpc.PartitionsStub(clients[addresses["datasets"]].channel),
            "Lineage": lineage.lineage,
            "Alerts": alerts_pb2_grpc.AlertsStub(clients[addresses["alerts"]].channel),
        }

    def close(self) -> None:
        for client in self._clients.values():
            client.close()

    def call(self, token: str, service: str, method: str, request: Any) -> Any:
        metadata = (("authorization", f"Bearer {token}"),) if token else None
        return getattr(self._stubs[service], method)(request, timeout=TIMEOUT, metadata=metadata)

    def whoami(self, token: str) -> Identity:
        answer = self.call(token, "Access", "WhoAmI", access_pb2.WhoAmIRequest())
        return Identity(answer.principal, answer.authorization, tuple(answer.grants))

    def stream(self, token: str, service: str, method: str, request: Any) -> Iterator[Any]:
        """A server-streaming call's messages (the caller stops reading when it has enough)."""
        metadata = (("authorization", f"Bearer {token}"),) if token else None
        return getattr(self._stubs[service], method)(request, timeout=TIMEOUT, metadata=metadata)


class NotConnected(Exception):
    """The console is up but the API it reads is not known yet (standalone before its gRPC server serves)."""


class PendingApi:
    """Forwards to the ConsoleApi in `holder["api"]` once set; before that, NotConnected."""

    def __init__(self, holder: dict[str, ConsoleApi]) -> None:
        self._holder = holder

    def __getattr__(self, name: str) -> Any:
        api = self._holder.get("api")
        if api is None:
            raise NotConnected()
        return getattr(api, name)

