"""Appends made durable after they commit, inside a unit of work that lets nothing out until it waits.

A consumer loop handling a poll for a subscription that asks for it opens `deferring()`: an event log
that can (SqliteEventLog on a file) commits that poll's appends without waiting for their fsync, so
the loop's other work (other services' polls, relays) goes on meanwhile, and the loop then awaits
`DeferredAppends.durable()`: one fsync in a worker thread makes every append committed before it
started durable (a group commit across services and polls). The loop commits the poll's bus offsets
and polls that subscription again only after it.

What a deferred append wrote leaves the process only once durable: the log's subscriptions (outbox
relays, the journal, read models) are served its events then, not before. Decisions, conflicts and
checkpoints are unchanged: the append is committed (visible to the service's next decision, checked
against expected versions, atomic with its checkpoints) when it returns. A killed process loses
nothing of it (the commit is in the file); a power loss loses at most the log's last commits, a
suffix (WAL frames are checksummed in order), with whatever was decided on them and nothing that left.

A handler whose apply has effects of its own after appending (starting a run, a webhook) must not
ask for it: outside a `deferring()` block every append is durable when it returns.
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator, Protocol


class DurabilityLost(RuntimeError):
    """Deferred commits cannot be known durable (an fsync of the WAL failed; a PostgreSQL backend that made
    them ended before their flush): they may be lost. Not an infrastructure error on purpose: the process
    stops and recovers from the log rather than letting out work that may be gone."""


class DeferringLog(Protocol):
    async def durable(self, ticket: int) -> None:
        """Until the append that returned `ticket` (and every one before it) is durable."""
        ...


class DeferredAppends:
    """The appends deferred within one `deferring()` block: the last ticket of each log."""

    def __init__(self) -> None:
        self.open = True
        self._tickets: dict[int, tuple[DeferringLog, int]] = {}

    def deferred(self, log: DeferringLog, ticket: int) -> None:
        self._tickets[id(log)] = (log, ticket)

    async def durable(self) -> None:
        """Until every append deferred in the block is durable (at once when there was none)."""
        tickets, self._tickets = list(self._tickets.values()), {}
        for log, ticket in tickets:
            await log.durable(ticket)


_CURRENT: contextvars.ContextVar[DeferredAppends | None] = contextvars.ContextVar("sluice_deferred_appends",
                                                                                  default=None)


@contextlib.contextmanager
def deferring(enabled: bool = True) -> Iterator[DeferredAppends]:
    """Within the block (this task, and what it awaits), appends may be deferred when `enabled`; once it
    ends, await `durable()` on what it yields before letting anything of the block's work out."""
    appends = DeferredAppends()
    token = _CURRENT.set(appends if enabled else None)
    try:
        yield appends
    finally:
        appends.open = False  # a task the block started and that outlives it appends durably
        _CURRENT.reset(token)


def current() -> DeferredAppends | None:
    """The open `deferring()` block an append is made in, if any."""
    appends = _CURRENT.get()
    return appends if appends is not None and appends.open else None
