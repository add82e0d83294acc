"""The launcher lease: which launcher instance owns the runs, for how long, under which epoch.

One stream (`LEASE_STREAM`). A launcher acquires the lease by appending `LeaseAcquired` with the
stream's version as its expected version: of two launchers trying at once, one wins, the other gets
WrongExpectedVersion. Each acquisition gets the next epoch; the holder renews before it expires
(`LeaseRenewed`). Every run transition a holder appends names the lease stream's version it last
wrote as the expected version in the same append, so a holder whose lease was taken over cannot
append one more (sluice_services.launcher.lease).

A `home` says where a holder's programs can be found again: its host (name and boot) and its data
dir. The lease is taken only when it expired (by its recorded `expires_at` and the taker's clock), or
by a launcher of the same home: that one holds the data dir's exclusive lock, so the previous
holder on that data dir has ended (sluice_services.dir_lock)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

LEASE_STREAM = "launcher-lease"


# Commands
@dataclass(frozen=True)
class Acquire:
    owner: str
    home: str
    seconds: float


@dataclass(frozen=True)
class Renew:
    owner: str
    epoch: int
    seconds: float


LeaseCommand = Acquire | Renew


# Events
@dataclass(frozen=True)
class LeaseAcquired:
    owner: str
    epoch: int
    home: str
    expires_at: datetime
    at: datetime


@dataclass(frozen=True)
class LeaseRenewed:
    owner: str
    epoch: int
    expires_at: datetime
    at: datetime


EVENTS = (LeaseAcquired, LeaseRenewed)
LeaseEvent = LeaseAcquired | LeaseRenewed


@dataclass(frozen=True)
class Lease:
    owner: str
    epoch: int
    home: str
    expires_at: datetime
    homes: tuple[tuple[int, str], ...] = ()
    """(epoch, home) of every acquisition: where the runs an older epoch started can be found again."""

    def expired(self, now: datetime) -> bool:
        return now >= self.expires_at

    def home_of(self, epoch: int) -> str | None:
        return next((home for e, home in self.homes if e == epoch), None)


class LeaseHeld(Exception):
    """Another launcher holds the lease and it has not expired."""

    def __init__(self, lease: Lease) -> None:
        super().__init__(f"the launcher lease is held by {lease.owner} (epoch {lease.epoch}) until "
                         f"{lease.expires_at.isoformat()}")
        self.lease = lease


class LeaseLost(Exception):
    """This launcher's lease was taken over (a newer epoch), or it has none: it appends nothing more."""


def decide(lease: Lease | None, command: LeaseCommand, now: datetime) -> list[LeaseEvent]:
    match command:
        case Acquire(owner, home, seconds):
            if lease is not None and not lease.expired(now) and lease.home != home:
                raise LeaseHeld(lease)
            epoch = 1 if lease is None else lease.epoch + 1
            return [LeaseAcquired(owner, epoch, home, now + timedelta(seconds=seconds), now)]
        case Renew(owner, epoch, seconds):
            if lease is None or lease.owner != owner or lease.epoch != epoch:
                raise LeaseLost(f"epoch {epoch} of {owner} is over: "
                                f"{'no lease' if lease is None else f'{lease.owner} holds epoch {lease.epoch}'}")
            # Renewed even past its expiry while nobody took it: the append's expected version fences.
            return [LeaseRenewed(owner, epoch, now + timedelta(seconds=seconds), now)]
    raise TypeError(f"unknown command {command!r}")


def evolve(lease: Lease | None, event: LeaseEvent) -> Lease:
    match event:
        case LeaseAcquired(owner, epoch, home, expires_at, _):
            homes = lease.homes if lease is not None else ()
            return Lease(owner, epoch, home, expires_at, (*homes, (epoch, home)))
        case LeaseRenewed(_, _, expires_at, _):
            return replace(lease, expires_at=expires_at)
    raise TypeError(f"unknown event {event!r}")
