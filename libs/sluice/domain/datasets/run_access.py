"""A launched run's access to the Partitions API: what its program may read and consume, from the
launcher's OpenRun (before the program starts) to the run's end (its outputs published, or what it
took released). The datasets service keeps it in the stream access-<run id>; a run credential is
honoured only while its run's access is open.

    events = decide(None, Open("run-1", (AccessGrant("web", ("*",)),)), now)  # [RunAccessOpened(...)]
    access = evolve(None, events[0])                                          # RunAccess(..., open=True)

Opening again (a retry's attempt, the launcher asking again after a failover) opens it with the grants
given; closing a closed or unknown run's access changes nothing."""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import datetime

from sluice.domain.errors import InvalidArgument
from sluice.domain.names import validate_name

STREAM_PREFIX = "access-"
EVERY_DATASET = "*"
"""In a grant's datasets: all of its namespace."""
_RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
MAX_GRANTS = 100


@dataclass(frozen=True)
class AccessGrant:
    namespace: str
    datasets: tuple[str, ...]
    """Dataset names, or EVERY_DATASET."""


@dataclass(frozen=True)
class RunAccess:
    run_id: str
    grants: tuple[AccessGrant, ...]
    open: bool


@dataclass(frozen=True)
class RunAccessOpened:
    run_id: str
    grants: tuple[AccessGrant, ...]
    at: datetime


@dataclass(frozen=True)
class RunAccessClosed:
    run_id: str
    reason: str
    at: datetime


EVENTS = (RunAccessOpened, RunAccessClosed)
RunAccessEvent = RunAccessOpened | RunAccessClosed


@dataclass(frozen=True)
class Open:
    run_id: str
    grants: tuple[AccessGrant, ...]


@dataclass(frozen=True)
class Close:
    run_id: str
    reason: str


RunAccessCommand = Open | Close


def stream_name(run_id: str) -> str:
    return STREAM_PREFIX + validate_run_id(run_id)


def validate_run_id(run_id: str, path: str = "run_id") -> str:
    if not isinstance(run_id, str) or not _RUN_ID.match(run_id):
        raise InvalidArgument(path, f"must be 1 to 128 letters, digits, '_' or '-', got {str(run_id)[:140]!r}")
    return run_id


def validate_grants(grants: tuple[AccessGrant, ...], path: str = "grants") -> tuple[AccessGrant, ...]:
    if not grants:
        raise InvalidArgument(path, "must name at least one namespace")
    if len(grants) > MAX_GRANTS:
        raise InvalidArgument(path, f"at most {MAX_GRANTS} namespaces, got {len(grants)}")
    for index, grant in enumerate(grants):
        validate_name(f"{path}[{index}].namespace", grant.namespace)
        if not grant.datasets:
            raise InvalidArgument(f"{path}[{index}].datasets", "must name a dataset, or '*' for all")
        for position, dataset in enumerate(grant.datasets):
            if dataset != EVERY_DATASET:
                validate_name(f"{path}[{index}].datasets[{position}]", dataset)
    return grants


def decide(access: RunAccess | None, command: RunAccessCommand, now: datetime) -> list[RunAccessEvent]:
    match command:
        case Open(run_id, grants):
            validate_run_id(run_id)
            validate_grants(grants)
            if access is not None and access.open and access.grants == grants:
                return []
            return [RunAccessOpened(run_id, grants, now)]
        case Close(run_id, reason):
            if access is None or not access.open:
                return []
            return [RunAccessClosed(run_id, reason[:500], now)]
    raise TypeError(f"not a run access command: {command!r}")


def evolve(access: RunAccess | None, event: RunAccessEvent) -> RunAccess | None:
    match event:
        case RunAccessOpened(run_id, grants, _):
            return RunAccess(run_id, grants, open=True)
        case RunAccessClosed():
            return replace(access, open=False) if access is not None else None
    return access
