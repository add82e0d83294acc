"""The application-service unit of work, written once for every service.

    parse -> skip what the log says was consumed -> load -> decide -> append (events, consumed
    positions and expected versions in one transaction) -> on a conflict reload, decide again -> route

A service supplies only its three parts:
- parse: a record into a command (a `BatchHandler`'s `parse`; MalformedMessage or InvalidArgument
  sends the record to the dead-letter topic with the reason: the consumer loop does that mapping);
- decide: one attempt that loads the state, decides, appends with the checkpoints it is given and
  folds what it appended; it raises WrongExpectedVersion having changed nothing;
- route: `route(recorded)`, called by the outbox relay for committed events only.

`retry_on_conflict` is the one conflict policy (reload what the conflict made stale, try again,
bounded); `ConsumingUnitOfWork` adds the consumed positions (`ConsumedOffsets`) around it for bus
handlers. In the spirit of cosmicpython's unit of work and eventsourcing's process applications,
where a process event records the tracking position and the new events in one transaction.
"""
from __future__ import annotations

from typing import Callable, Generic, Mapping, Sequence, TypeVar

from sluice.bus.port import Record
from sluice.eventlog.port import Checkpoint, CheckpointMoved, WrongExpectedVersion
from sluice.runtime.offsets import ConsumedOffsets

T = TypeVar("T")
C = TypeVar("C")

MAX_CONFLICT_RETRIES = 5
"""Attempts at one decision: conflicts come only from a second writer of the same stream (a
rebalance, an operator's command), so a few are plenty. Stores racing many writers for one stream
(a dataset's next transaction position) pass a larger bound."""


def retry_on_conflict(attempt: Callable[[], T], reload: Callable[[WrongExpectedVersion], None], *, what: str,
                      attempts: int = MAX_CONFLICT_RETRIES) -> T:
    """Run `attempt`; on WrongExpectedVersion let `reload` drop what the conflict made stale (or raise
    what another attempt cannot fix) and run it again, at most `attempts` times in all."""
    for _ in range(attempts):
        try:
            return attempt()
        except WrongExpectedVersion as conflict:
            reload(conflict)
    raise RuntimeError(f"{what}: gave up after {attempts} concurrent-write conflicts")


def reload_nothing(conflict: WrongExpectedVersion) -> None:
    """For an attempt that reads what it decides on afresh each time."""


def _no_more(record: Record, command: object, batch: Mapping[str, Checkpoint]) -> tuple[Checkpoint, ...]:
    return ()


class ConsumingUnitOfWork(Generic[C]):
    """A bus handler's unit of work over a poll's parsed records: the commands of records not
    consumed before are decided in one attempt (`decide(commands, checkpoints)`, True when it
    appended: then the checkpoints are recorded), their consumed positions appended with their
    events. A redelivered record is skipped, also after a restart.

    During a rebalance a partition's previous owner may still be recording the same records, so a
    checkpoint expects the position this member knows: if another writer recorded records since
    (CheckpointMoved), nothing was written; the positions are read again and the records decided
    again (those recorded are skipped). Another conflict goes to `reload`.

    Hooks: `load(items)` runs before each attempt (the matcher reads the streams the batch concerns);
    `more(record, command, batch)` gives further checkpoints to record with a command (the matcher's
    source positions; `batch`: those of the poll's earlier records), or None to skip the command (its own
    record's position is still recorded)."""

    def __init__(self, offsets: ConsumedOffsets, decide: Callable[[list[C], list[Checkpoint]], bool],
                 reload: Callable[[WrongExpectedVersion], None], *, what: str,
                 load: Callable[[Sequence[tuple[Record, C]]], None] | None = None,
                 more: Callable[[Record, C, Mapping[str, Checkpoint]], tuple[Checkpoint, ...] | None] = _no_more
                 ) -> None:
        self._offsets = offsets
        self._decide = decide
        self._reload = reload
        self._what = what
        self._load = load
        self._more = more

    def handle(self, items: Sequence[tuple[Record, C]]) -> None:
        pending: dict[str, Checkpoint] = {}

        def attempt() -> None:
            if self._load is not None:
                self._load(items)
            commands, checkpoints = self._unconsumed(items)
            pending.clear()
            pending.update(checkpoints)
            if commands and self._decide(commands, list(checkpoints.values())):
                for checkpoint in checkpoints.values():
                    self._offsets.recorded(checkpoint)

        def reload(conflict: WrongExpectedVersion) -> None:
            if isinstance(conflict, CheckpointMoved):
                self._offsets.refresh(set(pending))
            else:
                self._reload(conflict)

        retry_on_conflict(attempt, reload, what=self._what)

    def _unconsumed(self, items: Sequence[tuple[Record, C]]) -> tuple[list[C], dict[str, Checkpoint]]:
        """The commands of records not consumed before, and the checkpoints to append with them: per
        partition the position after its last record, expecting the position recorded (an append after
        another writer's fails), and what `more` adds."""
        commands: list[C] = []
        checkpoints: dict[str, Checkpoint] = {}
        consumed: dict[str, tuple[int, int]] = {}
        """Per partition's checkpoint: (its recorded position, the position after its last record)."""
        offsets = self._offsets
        for record, command in items:
            name = offsets.name(record)
            recorded = offsets.next(name)
            if record.offset < recorded:
                continue  # consumed before: its events are in the log
            consumed[name] = (recorded, record.offset + 1)
            more = self._more(record, command, checkpoints)
            if more is None:
                continue
            for extra in more:
                checkpoints[extra.name] = extra
            commands.append(command)
        for name, (recorded, after) in consumed.items():
            checkpoints[name] = Checkpoint(name, after, expected=recorded)
        return commands, checkpoints
