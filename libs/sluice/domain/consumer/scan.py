"""Reading new partitions from the index into the working set: pure, over what the caller looked up.

    view = IndexView(next_position=120, transactions={...})   # positions looked up so far
    result = scan(state, spec, view, own_position=None)
    while result.wanted:                                       # positions the scan reached but the view lacks
        view = view.including(lookup(result.wanted))
        result = scan(state, spec, view, own_position=None)

The scan first looks again at the in-flight positions (older than the high-water mark), then walks
forward from the high-water mark to `next_position`. An open transaction becomes (or stays) in
flight; an aborted one is dropped; a committed one enters the working set, unless there is no room,
in which case the forward walk stops there (an in-flight one stays in flight). The consumer's own
transaction is never read in the call it makes (seed 003: "exclude the current write pointer"),
but stays in flight, so once committed it is read by a later call.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Iterable, Mapping

from sluice.domain.consumer.state import ConsumerState, PartitionId
from sluice.domain.datasets.specs import DatasetSpec, Partition
from sluice.domain.datasets.transactions import Transaction, TransactionStatus

LOOKUP_PAGE = 1000
"""At most how many positions ahead of the high-water mark a caller looks up at once (fewer when
the working set has less room)."""


@dataclass(frozen=True)
class IndexView:
    next_position: int
    """Positions below this have been begun; nothing at or above it exists yet."""
    transactions: Mapping[int, Transaction] = field(default_factory=dict)

    def including(self, transactions: Iterable[Transaction]) -> IndexView:
        return IndexView(self.next_position, {**self.transactions, **{t.position: t for t in transactions}})


@dataclass(frozen=True)
class DiscoveredPartition:
    id: PartitionId
    partition: Partition
    committed_at: datetime


@dataclass(frozen=True)
class ScanResult:
    high_water_mark: int
    in_flight: tuple[int, ...]
    discovered: tuple[DiscoveredPartition, ...]
    wanted: tuple[int, ...]
    """Positions to look up before scanning again; empty when the scan is complete."""

    def changes(self, state: ConsumerState) -> bool:
        return (bool(self.discovered) or self.high_water_mark != state.high_water_mark
                or self.in_flight != state.in_flight)


class _Room:
    """What fits in the working set during one scan."""

    def __init__(self, state: ConsumerState) -> None:
        self.free = state.config.max_working_set - len(state.working_set)
        self.anything_there = bool(state.working_set)
        self.added: list[DiscoveredPartition] = []

    def admit(self, found: list[DiscoveredPartition]) -> bool:
        if len(found) > self.free and (self.anything_there or self.added):
            return False
        self.added += found
        self.free -= len(found)
        return True


def scan(state: ConsumerState, spec: DatasetSpec, view: IndexView, own_position: int | None = None) -> ScanResult:
    room = _Room(state)
    in_flight: list[int] = []
    wanted: list[int] = []
    for position in state.in_flight:
        if position == own_position:
            in_flight.append(position)
            continue
        transaction = view.transactions.get(position)
        if transaction is None:
            wanted.append(position)
            in_flight.append(position)
        elif transaction.status is TransactionStatus.OPEN:
            in_flight.append(position)
        elif transaction.status is TransactionStatus.COMMITTED and not room.admit(_found(state, spec, transaction)):
            in_flight.append(position)
    high_water_mark = state.high_water_mark
    while high_water_mark < view.next_position:
        position = high_water_mark
        transaction = view.transactions.get(position)
        if position == own_position:
            in_flight.append(position)
        elif transaction is None:   # a committed position holds at least one partition: look up what can fit
            page = max(1, min(LOOKUP_PAGE, room.free))
            wanted += range(position, min(position + page, view.next_position))
            break
        elif transaction.status is TransactionStatus.OPEN:
            in_flight.append(position)
        elif transaction.status is TransactionStatus.COMMITTED and not room.admit(_found(state, spec, transaction)):
            break
        high_water_mark += 1
    return ScanResult(high_water_mark, tuple(sorted(in_flight)), tuple(room.added), tuple(wanted))


def _found(state: ConsumerState, spec: DatasetSpec, transaction: Transaction) -> list[DiscoveredPartition]:
    config = state.config
    committed_at = transaction.committed_at
    assert committed_at is not None
    if not config.in_time_bounds(committed_at):
        return []
    return [DiscoveredPartition(PartitionId(transaction.position, index), partition, committed_at)
            for index, partition in enumerate(transaction.partitions)
            if config.where.empty or config.where.matches(spec, partition.key, partition.metadata)]
