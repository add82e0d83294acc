"""The launcher's side of the lease (sluice.domain.lease): acquire it, renew it on the injected clock,
and fence every run transition with it.

`fence()` is a StreamAppend of no event on the lease stream expecting the version this keeper last
wrote: appended in the same `append_batch` as a run's events, it makes the append fail
(WrongExpectedVersion on the lease stream) once another launcher acquired the lease, whatever this
one's clock says. The keeper then knows it lost the lease and appends nothing more."""
from __future__ import annotations

import logging
import os
import secrets
import socket
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

from sluice.clock import Clock
from sluice.domain import lease
from sluice.domain.lease import LEASE_STREAM, Acquire, Lease, LeaseHeld, LeaseLost, Renew
from sluice.eventlog.codec import EventTypes, encode
from sluice.eventlog.port import NO_STREAM, EventLog, StreamAppend, WrongExpectedVersion
from sluice.ids import derived_id
from sluice.runtime.aggregates import AggregateStore
from sluice.runtime.unit_of_work import retry_on_conflict

log = logging.getLogger(__name__)

TYPES = EventTypes(lease.EVENTS)
EPOCH_METADATA = "lease_epoch"
"""Every run event a launcher with a lease appends carries its epoch in the event's metadata."""
S = TypeVar("S")
DEFAULT_LEASE_SECONDS = 30.0
HOME_FILE = "launcher-home"


class LeaseChange(Enum):
    """What a keeper's `tick` did."""

    ACQUIRED = "acquired"
    """This launcher took the lease: it owns the runs now (and judges the ones older epochs left)."""
    LOST = "lost"
    """Another launcher took the lease over: this one appends no run transition any more."""


@dataclass(frozen=True)
class LeaseTerms:
    seconds: float = DEFAULT_LEASE_SECONDS
    renew_every: float | None = None
    """Seconds between renewals; default a third of the lease, so two renewals may fail before it expires."""

    @property
    def renew_seconds(self) -> float:
        return self.renew_every if self.renew_every is not None else self.seconds / 3


def launcher_home(data_dir: Path) -> str:
    """Where this launcher's programs can be found again: this host (name and boot) and this data dir
    (an id written in it once, so a copied or remounted volume elsewhere is another home)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / HOME_FILE
    try:
        dir_id = path.read_text().strip()
    except FileNotFoundError:
        dir_id = ""
    if not dir_id:
        dir_id = uuid.uuid4().hex
        temporary = path.with_name(f"{HOME_FILE}.{os.getpid()}.tmp")
        temporary.write_text(dir_id + "\n")
        try:
            os.link(temporary, path)  # the first writer's id wins
        except FileExistsError:
            dir_id = path.read_text().strip()
        finally:
            temporary.unlink()
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = "unknown-boot"
    return f"{socket.gethostname()}/{boot}/{dir_id}"


def new_owner() -> str:
    """A launcher instance: this host's name and a random part, new for every process."""
    return f"{socket.gethostname()}-{secrets.token_hex(6)}"


class LeaseKeeper:
    def __init__(self, event_log: EventLog, clock: Clock, home: str, terms: LeaseTerms = LeaseTerms(),
                 owner: str | None = None) -> None:
        self._log = event_log
        self._clock = clock
        self.home = home
        self.terms = terms
        self.owner = owner or new_owner()
        self._lease: Lease | None = None
        self._version = NO_STREAM
        self._epoch = 0
        self.holding = False
        self._lost_unreported = False
        """A fenced append found the lease taken over: the next `tick` reports LOST (the launcher steps down)."""
        self._renewed_at: datetime | None = None

    # -- what the launcher asks --------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        """The epoch this keeper holds, or held last (0: never)."""
        return self._epoch

    @property
    def lease(self) -> Lease | None:
        """The lease as this keeper last read or wrote it (another launcher's, once it lost it)."""
        return self._lease

    def mine(self, epoch: int) -> bool:
        """Whether an attempt owned by `epoch` was this home's: its wrapper's files are in this data dir."""
        return bool(epoch) and (epoch == self._epoch or (self._lease is not None and self._lease.home_of(epoch) == self.home))

    def valid(self, now: datetime) -> bool:
        """Held, and not expired by this launcher's own clock: only then does it start a program."""
        return self.holding and self._lease is not None and now < self._lease.expires_at

    def fence(self) -> StreamAppend:
        """The lease stream's version, expected in the same append as a run's events; LeaseLost when not held."""
        if not self.holding:
            raise LeaseLost(f"{self.owner} does not hold the launcher lease")
        return StreamAppend(LEASE_STREAM, [], self._version)

    def conflicted(self, conflict: WrongExpectedVersion) -> None:
        """An append fenced by `fence()` failed on the lease stream: another launcher took the lease."""
        if self.holding:
            log.warning("launcher %s (epoch %s): the lease was taken over (%s); stepping down", self.owner,
                        self.epoch, conflict)
            self._lost_unreported = True
        self.holding = False
        self._read()

    def next_at(self) -> datetime:
        """When `tick` has something to do: the next renewal, or (standing by) the lease's expiry."""
        now = self._clock.now()
        if self._lost_unreported:
            return now
        if self.holding and self._renewed_at is not None:
            return self._renewed_at + timedelta(seconds=self.terms.renew_seconds)
        if self._lease is not None and self._lease.home != self.home:
            return max(now, self._lease.expires_at)
        return now

    # -- the loop's step -------------------------------------------------------------------------

    def tick(self) -> LeaseChange | None:
        """Renew when due while holding; standing by, acquire once the lease expired (or it was this
        home's). Infrastructure errors of the log are raised (the caller retries later)."""
        now = self._clock.now()
        if self._lost_unreported:
            self._lost_unreported = False
            return LeaseChange.LOST
        if self.holding:
            if self._renewed_at is not None and now < self._renewed_at + timedelta(seconds=self.terms.renew_seconds):
                return None
            return self._renew(now)
        return self._acquire(now)

    def _renew(self, now: datetime) -> LeaseChange | None:
        try:
            self._append(lease.decide(self._lease, Renew(self.owner, self.epoch, self.terms.seconds), now))
        except (WrongExpectedVersion, LeaseLost) as lost:
            self.conflicted(lost if isinstance(lost, WrongExpectedVersion) else WrongExpectedVersion(
                LEASE_STREAM, self._version, -1))
            self._lost_unreported = False
            return LeaseChange.LOST
        self._renewed_at = now
        return None

    def _acquire(self, now: datetime) -> LeaseChange | None:
        self._read()
        try:
            events = lease.decide(self._lease, Acquire(self.owner, self.home, self.terms.seconds), now)
            self._append(events)
        except LeaseHeld:
            return None
        except WrongExpectedVersion:  # another launcher acquired (or renewed) first
            self._read()
            return None
        self.holding = True
        self._epoch = self._lease.epoch
        self._renewed_at = now
        previous = self._lease.homes[-2] if len(self._lease.homes) > 1 else None
        log.warning("launcher %s acquired the lease, epoch %s (before: %s)", self.owner, self.epoch,
                    f"epoch {previous[0]} at {previous[1]}" if previous else "none")
        return LeaseChange.ACQUIRED

    def _append(self, events: list) -> None:
        new = [encode(e, derived_id(LEASE_STREAM, str(self._version + 1 + i))) for i, e in enumerate(events)]
        self._version = self._log.append(LEASE_STREAM, new, self._version)
        for event in events:
            self._lease = lease.evolve(self._lease, event)

    def _read(self) -> None:
        """The lease as the log has it now: folded from the version this keeper had on."""
        for recorded in self._log.read_stream(LEASE_STREAM, self._version + 1):
            self._lease = lease.evolve(self._lease, TYPES.decode(recorded))
            self._version = recorded.version


def fenced_execute(store: AggregateStore[S], event_log: EventLog, keeper: LeaseKeeper, stream: str,
                   decide: Callable[[S], Sequence[Any]]) -> tuple[S, list]:
    """`aggregates.execute` fenced by the lease: the events (tagged with the keeper's epoch) are appended
    in one batch with `keeper.fence()`; LeaseLost, having appended nothing, once another launcher took
    the lease over (or when the keeper holds none)."""

    def attempt() -> tuple[S, list]:
        loaded = store.load(stream)
        events = list(decide(loaded.state))
        if not events:
            return loaded.state, []
        prepared = store.prepare(stream, events)
        tagged = [replace(event, metadata={**event.metadata, EPOCH_METADATA: str(keeper.epoch)})
                  for event in prepared.events]
        # the fence first: a lease taken over is the conflict reported, not the run's own stream
        versions = event_log.append_batch([keeper.fence(), replace(prepared, events=tagged)])
        state = store.commit(stream, events, versions[1])
        store.snapshot_if_due()
        return state, events

    def reload(conflict: WrongExpectedVersion) -> None:
        if conflict.stream == LEASE_STREAM:
            keeper.conflicted(conflict)
            raise LeaseLost(f"launcher {keeper.owner}: the lease was taken over") from conflict
        store.forget(conflict.stream)

    return retry_on_conflict(attempt, reload, what=f"stream {stream}")
