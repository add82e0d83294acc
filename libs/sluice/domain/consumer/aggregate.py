"""The partition consumer as an aggregate: pure decide/evolve, one stream per consumer.

Several takers (concurrent runs of a program) share one consumer: each call is decided against the
stream's current version and appended with it as the expected version, so two takers never take
the same partition (the loser of a race decides again on the winner's state).

    events = decide(state, Consume(taker="run-1", limit=10), now, spec, view)
    state = fold(state, events)
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Iterable, Sequence

from sluice.domain.consumer.scan import DiscoveredPartition, IndexView, scan
from sluice.domain.consumer.state import (
    ConsumerConfig,
    ConsumerRef,
    ConsumerState,
    HistoryRecord,
    Outcome,
    PartitionId,
    WorkItem,
    WorkStatus,
    validate_config,
    validate_ref,
)
from sluice.domain.datasets.filters import MATCH_ALL, PartitionFilter
from sluice.domain.datasets.specs import DatasetSpec
from sluice.domain.errors import FailedPrecondition, InvalidArgument


# Commands
@dataclass(frozen=True)
class CreateConsumer:
    consumer: ConsumerRef
    config: ConsumerConfig = ConsumerConfig()


@dataclass(frozen=True)
class Configure:
    config: ConsumerConfig


@dataclass(frozen=True)
class Consume:
    """Expire timed-out partitions, read new ones into the working set, take up to `limit` of them."""

    taker: str
    limit: int
    where: PartitionFilter = MATCH_ALL
    """Take only AVAILABLE partitions that match (the others stay for other calls)."""
    own_position: int | None = None
    """The position of the transaction the taker writes in, if it writes to the same dataset."""


@dataclass(frozen=True)
class Complete:
    taker: str
    partitions: tuple[PartitionId, ...]
    strict: bool = False
    """Every partition must still be in the working set (a commit sequence's step: completing what
    another taker finished meanwhile would publish its work twice). Otherwise finished ones are
    skipped, so a repeated call is a no-op."""


@dataclass(frozen=True)
class Fail:
    taker: str
    partitions: tuple[PartitionId, ...]
    reason: str = ""


@dataclass(frozen=True)
class Untake:
    """Give partitions back without counting a failure (the taker did not get to them)."""

    taker: str
    partitions: tuple[PartitionId, ...]


ConsumerCommand = CreateConsumer | Configure | Consume | Complete | Fail | Untake
"""What the aggregate's `decide` takes."""


# Events
@dataclass(frozen=True)
class ConsumerCreated:
    consumer: ConsumerRef
    config: ConsumerConfig
    at: datetime


@dataclass(frozen=True)
class ConsumerConfigured:
    config: ConsumerConfig
    at: datetime


@dataclass(frozen=True)
class PartitionsDiscovered:
    high_water_mark: int
    in_flight: tuple[int, ...]
    partitions: tuple[DiscoveredPartition, ...]
    at: datetime


@dataclass(frozen=True)
class PartitionsTaken:
    taker: str
    partitions: tuple[PartitionId, ...]
    at: datetime


@dataclass(frozen=True)
class PartitionsCompleted:
    taker: str
    partitions: tuple[PartitionId, ...]
    at: datetime


@dataclass(frozen=True)
class PartitionsFailed:
    """Each partition's failure count goes up by one; it is AVAILABLE again (unless discarded next)."""

    taker: str
    partitions: tuple[PartitionId, ...]
    reason: str
    at: datetime


@dataclass(frozen=True)
class PartitionsDiscarded:
    partitions: tuple[PartitionId, ...]
    reason: str
    at: datetime


@dataclass(frozen=True)
class PartitionsReturned:
    taker: str
    partitions: tuple[PartitionId, ...]
    at: datetime


EVENTS = (ConsumerCreated, ConsumerConfigured, PartitionsDiscovered, PartitionsTaken, PartitionsCompleted,
          PartitionsFailed, PartitionsDiscarded, PartitionsReturned)
ConsumerEvent = (ConsumerCreated | ConsumerConfigured | PartitionsDiscovered | PartitionsTaken | PartitionsCompleted
                 | PartitionsFailed | PartitionsDiscarded | PartitionsReturned)


def decide(state: ConsumerState | None, command: ConsumerCommand, now: datetime, spec: DatasetSpec | None = None,
           view: IndexView | None = None) -> list[ConsumerEvent]:
    match command:
        case CreateConsumer(consumer, config):
            validate_ref(consumer)
            validate_config(config)
            return [] if state is not None else [ConsumerCreated(consumer, config, now)]
    if state is None:
        raise FailedPrecondition("the consumer does not exist yet")
    match command:
        case Configure(config):
            validate_config(config)
            return [] if config == state.config else [ConsumerConfigured(config, now)]
        case Consume():
            if spec is None or view is None:
                raise ValueError("Consume is decided over the dataset's spec and a view of its index")
            return _consume(state, command, now, spec, view)
        case Complete(taker, partitions, strict):
            return _complete(state, taker, partitions, now, strict)
        case Fail(taker, partitions, reason):
            held = _held_by(state, taker, _checked(state, partitions))
            return _failed(state, taker, held, reason or "failed", now)
        case Untake(taker, partitions):
            held = _held_by(state, taker, _checked(state, partitions))
            return [PartitionsReturned(taker, held, now)] if held else []
    raise TypeError(f"unknown command {command!r}")


def evolve(state: ConsumerState | None, event: ConsumerEvent) -> ConsumerState:
    match event:
        case ConsumerCreated(consumer, config, _):
            return ConsumerState(consumer, config)
    assert state is not None, f"{type(event).__name__} before ConsumerCreated"
    match event:
        case ConsumerConfigured(config, _):
            return replace(state, config=config)
        case PartitionsDiscovered(high_water_mark, in_flight, found, _):
            added = tuple(WorkItem(p.id, p.partition, p.committed_at) for p in found)
            return replace(state, high_water_mark=high_water_mark, in_flight=tuple(in_flight),
                           working_set=tuple(sorted(state.working_set + added, key=lambda item: item.id)))
        case PartitionsTaken(taker, ids, at):
            return _update(state, ids, lambda item: WorkItem(item.id, item.partition, item.committed_at,
                                                             WorkStatus.IN_PROGRESS, item.failures, taker, at))
        case PartitionsReturned(_, ids, _):
            return _update(state, ids, _released)
        case PartitionsFailed(_, ids, _, _):
            return _update(state, ids, lambda item: _released(item, failed=1))
        case PartitionsCompleted(taker, ids, at):
            return _finish(state, ids, Outcome.COMPLETED, at, taker)
        case PartitionsDiscarded(ids, _, at):
            return _finish(state, ids, Outcome.DISCARDED, at)
    raise TypeError(f"unknown event {event!r}")


def fold(state: ConsumerState | None, events: Iterable[ConsumerEvent]) -> ConsumerState | None:
    for event in events:
        state = evolve(state, event)
    return state


# -- deciding -----------------------------------------------------------------------------------

def _consume(state: ConsumerState, command: Consume, now: datetime, spec: DatasetSpec,
             view: IndexView) -> list[ConsumerEvent]:
    if not isinstance(command.taker, str) or not command.taker:
        raise InvalidArgument("taker", "must not be empty")
    if not isinstance(command.limit, int) or isinstance(command.limit, bool) or command.limit < 1:
        raise InvalidArgument("limit", f"must be at least 1, got {command.limit!r}")
    events: list[ConsumerEvent] = _expired(state, now)
    current = fold(state, events)
    result = scan(current, spec, view, command.own_position)
    if result.changes(current):
        discovered = PartitionsDiscovered(result.high_water_mark, result.in_flight, result.discovered, now)
        events.append(discovered)
        current = evolve(current, discovered)
    where = command.where
    taken = tuple(item.id for item in current.working_set
                  if item.status is WorkStatus.AVAILABLE
                  and (where.empty or where.matches(spec, item.partition.key, item.partition.metadata)))
    if taken[:command.limit]:
        events.append(PartitionsTaken(command.taker, taken[:command.limit], now))
    return events


def _expired(state: ConsumerState, now: datetime) -> list[ConsumerEvent]:
    timeout = state.config.timeout_seconds
    if not timeout:
        return []
    deadline = now - timedelta(seconds=timeout)
    by_taker: dict[str, list[PartitionId]] = {}
    for item in state.working_set:
        if item.status is WorkStatus.IN_PROGRESS and item.taken_at is not None and item.taken_at <= deadline:
            by_taker.setdefault(item.taken_by, []).append(item.id)
    events: list[ConsumerEvent] = []
    for taker, ids in sorted(by_taker.items()):
        events += _failed(state, taker, tuple(ids), f"timed out after {timeout} s in progress", now)
    return events


def _failed(state: ConsumerState, taker: str, ids: tuple[PartitionId, ...], reason: str,
            now: datetime) -> list[ConsumerEvent]:
    if not ids:
        return []
    items = state.items()
    limit = state.config.max_retries
    exhausted = tuple(i for i in ids if items[i].failures + 1 > limit)
    events: list[ConsumerEvent] = [PartitionsFailed(taker, ids, reason, now)]
    if exhausted:
        events.append(PartitionsDiscarded(exhausted, f"failed {limit + 1} times; last: {reason}", now))
    return events


def _complete(state: ConsumerState, taker: str, ids: Sequence[PartitionId], now: datetime,
              strict: bool) -> list[ConsumerEvent]:
    items = state.items()
    done = []
    for partition in _checked(state, ids):
        item = items.get(partition)
        if item is None and strict:
            raise FailedPrecondition(f"partition {partition} is no longer in the working set of {state.consumer} "
                                     "(it was completed or discarded since)")
        if item is None:
            continue  # finished already: a repeated call
        if item.status is WorkStatus.IN_PROGRESS and item.taken_by != taker:
            raise FailedPrecondition(f"partition {partition} is in progress by {item.taken_by}, not {taker} "
                                     "(it timed out and was taken again)")
        done.append(partition)
    return [PartitionsCompleted(taker, tuple(done), now)] if done else []


def _checked(state: ConsumerState, ids: Sequence[PartitionId]) -> tuple[PartitionId, ...]:
    for index, partition in enumerate(ids):
        if not isinstance(partition, PartitionId):
            raise InvalidArgument(f"partitions[{index}]", f"must be a partition id, got {partition!r}")
        if not state.was_handed_out(partition):
            raise InvalidArgument(f"partitions[{index}]", f"partition {partition} was never read by consumer "
                                  f"{state.consumer}")
    return tuple(dict.fromkeys(ids))


def _held_by(state: ConsumerState, taker: str, ids: tuple[PartitionId, ...]) -> tuple[PartitionId, ...]:
    items = state.items()
    return tuple(i for i in ids if i in items and items[i].status is WorkStatus.IN_PROGRESS
                 and items[i].taken_by == taker)


# -- evolving -----------------------------------------------------------------------------------

def _released(item: WorkItem, failed: int = 0) -> WorkItem:
    return WorkItem(item.id, item.partition, item.committed_at, WorkStatus.AVAILABLE, item.failures + failed)


def _update(state: ConsumerState, ids: Sequence[PartitionId], change) -> ConsumerState:
    wanted = set(ids)
    return replace(state, working_set=tuple(change(item) if item.id in wanted else item for item in state.working_set))


def _finish(state: ConsumerState, ids: Sequence[PartitionId], outcome: Outcome, at: datetime,
            taker: str = "") -> ConsumerState:
    wanted = set(ids)
    finished = [item for item in state.working_set if item.id in wanted]
    records = tuple(HistoryRecord(item.id, dict(item.partition.key), outcome, at, taker or item.taken_by,
                                  item.failures) for item in finished)
    size = state.config.history_size
    history = (state.history + records)[-size:] if size else ()
    return replace(state, working_set=tuple(item for item in state.working_set if item.id not in wanted),
                   history=history)
