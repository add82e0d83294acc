"""A launched run's access to the Partitions API: what its program may read and consume, from the
launcher's OpenRun (before the program starts) to the run's end (its outputs published, or what it
took released). The datasets service keeps it in the stream access-<run id>; a run credential is
honoured only while its run's access is open.

    events = decide(None, Open("run-1", (AccessGrant("web", ("*",)),)), now)  # [RunAccessOpened(...)]
    access = evolve(None, events[0])                                          # RunAccess(..., open=True)

Opening again (the launcher asking again after a failover) opens it with the grants given; closing a
closed or unknown run's access changes nothing.

Attempts fence the run's end (the launcher names the attempt; 0: the current one, as callers that name
none): a retry's attempt opens it anew; an attempt ends once, published (`Publish`, appended with its
commit sequence) or released (`Close`), and an attempt that ended, or that a later one superseded, can
neither open it again nor publish (FailedPrecondition naming the attempt). A stale launcher's attempt
is thus refused by whichever of its end and the current owner's came second in this stream."""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import datetime

from sluice.domain.errors import FailedPrecondition, InvalidArgument
from sluice.domain.names import validate_name
from sluice.domain.runs import OutputPartition

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
    attempt: int = 0
    """The attempt it was last opened or ended for (0: none named)."""
    published: bool = False
    """`attempt` published the run's outputs (False too for outputs published before attempts were fenced)."""
    outputs: tuple[OutputPartition, ...] = ()
    """What it published, as published."""


@dataclass(frozen=True)
class RunAccessOpened:
    run_id: str
    grants: tuple[AccessGrant, ...]
    at: datetime
    attempt: int = 0


@dataclass(frozen=True)
class RunAccessClosed:
    run_id: str
    reason: str
    at: datetime
    attempt: int = 0


@dataclass(frozen=True)
class RunOutputsPublished:
    """Attempt `attempt` published the run's outputs: appended with its commit sequence; the access ends."""

    run_id: str
    attempt: int
    outputs: tuple[OutputPartition, ...]
    at: datetime


EVENTS = (RunAccessOpened, RunAccessClosed, RunOutputsPublished)
RunAccessEvent = RunAccessOpened | RunAccessClosed | RunOutputsPublished


@dataclass(frozen=True)
class Open:
    run_id: str
    grants: tuple[AccessGrant, ...]
    attempt: int = 0


@dataclass(frozen=True)
class Close:
    """The attempt ended without publishing (its partitions are released)."""

    run_id: str
    reason: str
    attempt: int = 0


@dataclass(frozen=True)
class Publish:
    run_id: str
    attempt: int
    outputs: tuple[OutputPartition, ...]


RunAccessCommand = Open | Close | Publish


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
        case Open(run_id, grants, attempt):
            validate_run_id(run_id)
            validate_grants(grants)
            attempt = _current(access, attempt)
            if access is not None and attempt == access.attempt and access.open and access.grants == grants:
                return []
            if access is not None and command.attempt:
                _not_ended(access, attempt, "open the run's access")
            return [RunAccessOpened(run_id, grants, now, attempt)]
        case Close(run_id, reason, attempt):
            attempt = _current(access, attempt)
            if access is None:
                return [RunAccessClosed(run_id, reason[:500], now, attempt)] if attempt else []
            if access.published or attempt < access.attempt or (attempt == access.attempt and not access.open):
                return []  # ended already, or a stale attempt's end: the current attempt's access stays
            return [RunAccessClosed(run_id, reason[:500], now, attempt)]
        case Publish(run_id, attempt, outputs):
            attempt = _current(access, attempt)
            if access is not None and access.published:
                if attempt != access.attempt:
                    raise FailedPrecondition(f"run {run_id}: attempt {access.attempt} published its outputs; "
                                             f"attempt {attempt} cannot")
                return []
            if access is not None:
                _not_ended(access, attempt, "publish")
            return [RunOutputsPublished(run_id, attempt, outputs, now)]
    raise TypeError(f"not a run access command: {command!r}")


def _current(access: RunAccess | None, attempt: int) -> int:
    """The attempt named, or (0) the run's current one."""
    return attempt or (access.attempt if access is not None else 0)


def _not_ended(access: RunAccess, attempt: int, what: str) -> None:
    """FailedPrecondition naming the attempt when it was superseded, or ended (published or released)."""
    if access.published:
        raise FailedPrecondition(f"run {access.run_id}: attempt {access.attempt} published its outputs; "
                                 f"attempt {attempt} cannot {what}")
    if attempt < access.attempt:
        raise FailedPrecondition(f"attempt {attempt} of run {access.run_id} is not its current attempt "
                                 f"(attempt {access.attempt} is): it cannot {what}")
    if attempt == access.attempt and not access.open:
        raise FailedPrecondition(f"attempt {attempt} of run {access.run_id} has ended (released): it cannot {what}")


def evolve(access: RunAccess | None, event: RunAccessEvent) -> RunAccess | None:
    match event:
        case RunAccessOpened(run_id, grants, _, attempt):
            return RunAccess(run_id, grants, open=True, attempt=attempt)
        case RunAccessClosed(run_id, _, _, attempt):
            return replace(access or RunAccess(run_id, (), open=False), open=False,
                           attempt=attempt or (access.attempt if access is not None else 0))
        case RunOutputsPublished(run_id, attempt, outputs, _):
            return replace(access or RunAccess(run_id, (), open=False), open=False, attempt=attempt, published=True,
                           outputs=outputs)
    return access
