"""Deciding a call: who the caller is (the authenticators, in turn), and whether its grants hold the
rule's permission on every target of the request (sluice.runtime.permissions). The gRPC interceptor
(sluice.runtime.grpc_security) and the HTTP middleware (sluice.runtime.http_auth) both ask this."""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from sluice.runtime.access import ANY_NAMESPACE, Authenticator, Grant, Principal
from sluice.runtime.permissions import DATASET_SCOPED, Resolver, Rule, Target, permitted

ANONYMOUS = Principal("anonymous", ())
"""Who a caller is when authorization is off (every call allowed)."""


@dataclass(frozen=True)
class Refusal:
    code: str
    """UNAUTHENTICATED or PERMISSION_DENIED."""
    message: str


@dataclass
class Authorizer:
    authenticators: Sequence[Authenticator]
    resolvers: Mapping[str, Resolver] = field(default_factory=dict)

    def authenticate(self, bearer: str | None, peer_subject: str | None) -> Principal | None:
        for authenticator in self.authenticators:
            principal = authenticator.authenticate(bearer, peer_subject)
            if principal is not None:
                return principal
        return None

    def refusal(self, bearer: str | None) -> str | None:
        """Why an authenticator refused a bearer token it issued (one with a `refusal` method: a run credential
        whose attempt ended), for the UNAUTHENTICATED message; None: no authenticator says."""
        for authenticator in self.authenticators:
            explain = getattr(authenticator, "refusal", None)
            reason = explain(bearer) if explain is not None else None
            if reason:
                return reason
        return None

    async def check(self, principal: Principal, rule: Rule, request: Any) -> Refusal | None:
        """None when `principal` may make `request`; else the refusal naming what it lacks."""
        if rule.permission is None:
            return None
        targets = rule.targets(request, self.resolvers)
        if inspect.isawaitable(targets):
            targets = await targets
        for target in targets:
            if not any(covers(grant, rule.permission, target) for grant in principal.grants):
                return Refusal("PERMISSION_DENIED",
                               f"{principal.name} lacks {rule.permission} on {describe(target)}")
        return None


def covers(grant: Grant, permission: str, target: Target) -> bool:
    """Whether `grant` gives `permission` on `target`."""
    if not permitted(grant.role, permission):
        return False
    if target.namespace is None:  # unknown: the service answers NOT_FOUND to anyone holding it somewhere
        return True
    if grant.namespace != ANY_NAMESPACE and grant.namespace != target.namespace:
        return False
    if grant.role not in DATASET_SCOPED or target.listing:
        return True
    return bool(target.dataset) and ("*" in grant.datasets or target.dataset in grant.datasets)


def may_read(principal: Principal, permission: str, namespace: str, dataset: str) -> bool:
    return any(covers(g, permission, Target(namespace, dataset)) for g in principal.grants)


def describe(target: Target) -> str:
    if target.namespace is None:
        return "any namespace"
    if target.namespace == ANY_NAMESPACE:
        return "every namespace (*)"
    return f"namespace {target.namespace}" + (f", dataset {target.dataset}" if target.dataset else "")


def bearer_of(header: str | None) -> tuple[str | None, bool]:
    """The token in an `authorization` value, and whether the value was there at all."""
    if header is None:
        return None, False
    scheme, _, token = header.partition(" ")
    return (token if scheme.lower() == "bearer" and token else ""), True
