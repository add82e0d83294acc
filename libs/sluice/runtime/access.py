"""Who a caller is (a principal) and what it may do (grants of a role in a namespace).

Authenticators turn what a call presents (a bearer token, a client certificate's subject) into a
principal; the gRPC interceptor and the HTTP middleware ask each configured authenticator in turn.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol


class Role(enum.Enum):
    ADMIN = "admin"
    """Everything in its namespace: operator's and producer's rights, releasing quarantines."""
    OPERATOR = "operator"
    """Schedules, apps and runs; reads."""
    PRODUCER = "producer"
    """Notifications and partitions of its named datasets; reads of those datasets."""
    READER = "reader"
    """Every read in its namespace."""
    PROGRAM = "program"
    """A launched run: reads and consumes partitions of its datasets, until the run ends."""


ANY_NAMESPACE = "*"


@dataclass(frozen=True)
class Grant:
    role: Role
    namespace: str
    """A namespace, or ANY_NAMESPACE."""
    datasets: frozenset[str] = frozenset()
    """PRODUCER and PROGRAM: the dataset names in `namespace` the grant covers (empty: none)."""


@dataclass(frozen=True)
class Principal:
    name: str
    """Who, for messages and `sluice auth whoami`: "token:alice", "mtls:CN=ingest", "run:<run id>"."""
    grants: tuple[Grant, ...]


class Authenticator(Protocol):
    def authenticate(self, bearer: str | None, peer_subject: str | None) -> Principal | None:
        """The principal these credentials prove, None when they are not this authenticator's."""
        ...
