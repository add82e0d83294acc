"""Datasets and their partition index on the event-log port (any adapter: SQLite, PostgreSQL, ...).

    store = DatasetStore(log, clock)
    store.create(spec)
    position = store.begin("experiments", "clickstream", owner="run-7")   # reserves the next position
    store.commit("experiments", "clickstream", position, [Partition(...), ...])   # once: the notification
    store.add("experiments", "clickstream", [Partition(...)])            # begin + commit in one append
    store.query("experiments", "clickstream", PartitionQuery(where=..., committed_after=...))

Streams are described in sluice.domain.datasets.transactions. A position is the version of its
TransactionStarted event in the dataset's `transactions-` stream, so positions are dense, and a
reader that sees `next_position` N knows every position below N has begun: each one's outcome is
a single read of its own small stream, whatever the size of the dataset.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Iterable, Sequence

from sluice.clock import Clock
from sluice.eventlog.codec import EventTypes
from sluice.domain.consumer.state import PartitionId
from sluice.domain.datasets.filters import MATCH_ALL, PartitionFilter, validate_filter
from sluice.domain.datasets.specs import DatasetSpec, Partition, validate_dataset, validate_name
from sluice.domain.datasets.transactions import (
    DATASET_EVENTS,
    TRANSACTION_EVENTS,
    DatasetCreated,
    Transaction,
    TransactionStarted,
    TransactionStatus,
    dataset_stream,
    decide_abort,
    decide_commit,
    decide_create,
    outcome_of,
    positions_stream,
    transaction_stream,
)
from sluice.datasets.events import decode_event, encode_event
from sluice.eventlog.port import NO_STREAM, EventLog, NewEvent, StreamAppend, WrongExpectedVersion
from sluice.ids import derived_id
from sluice.domain.errors import InvalidArgument, NotFound
from sluice.runtime.unit_of_work import reload_nothing, retry_on_conflict

TYPES = EventTypes(DATASET_EVENTS + TRANSACTION_EVENTS)
MAX_CONFLICTS = 1000
"""Begin races other writers for the next position; it retries on each lost race (each one a few
milliseconds), far more often than any real contention needs."""
MAX_QUERY_LIMIT = 10_000


@dataclass(frozen=True)
class PartitionQuery:
    where: PartitionFilter = MATCH_ALL
    committed_after: datetime | None = None
    """Only partitions committed at or after this time."""
    committed_before: datetime | None = None
    """Only partitions committed before this time."""
    after: PartitionId | None = None
    """Resume after this partition (the last one of the previous page)."""
    limit: int = 1000


@dataclass(frozen=True)
class IndexedPartition:
    id: PartitionId
    partition: Partition
    committed_at: datetime


def events_for(stream: str, first_version: int, events: Sequence[object]) -> list[NewEvent]:
    """Events with ids derived from (stream, version): a retried append produces the same ids."""
    return [encode_event(event, derived_id(stream, str(first_version + offset))) for offset, event in enumerate(events)]


class DatasetStore:
    def __init__(self, log: EventLog, clock: Clock) -> None:
        self._log = log
        self._clock = clock
        self._specs: dict[tuple[str, str], DatasetSpec] = {}

    # -- datasets ------------------------------------------------------------------------------

    def create(self, spec: DatasetSpec) -> DatasetSpec:
        validate_dataset(spec)
        existing = self.find(spec.namespace, spec.name)
        events = decide_create(existing, spec, self._clock.now())
        if events:
            stream = dataset_stream(spec.namespace, spec.name)
            try:
                self._log.append(stream, events_for(stream, 0, events), NO_STREAM)
            except WrongExpectedVersion:  # created concurrently: the same definition is fine, another is not
                self._specs.pop((spec.namespace, spec.name), None)
                decide_create(self.find(spec.namespace, spec.name), spec, self._clock.now())
        self._specs[(spec.namespace, spec.name)] = spec
        return spec

    def find(self, namespace: str, name: str) -> DatasetSpec | None:
        spec = self._specs.get((namespace, name))
        if spec is None:
            for recorded in self._log.read_stream(dataset_stream(namespace, name)):
                event = TYPES.decode(recorded)
                if isinstance(event, DatasetCreated):
                    spec = self._specs[(namespace, name)] = event.spec
        return spec

    def get(self, namespace: str, name: str) -> DatasetSpec:
        validate_name("namespace", namespace)
        validate_name("dataset", name)
        spec = self.find(namespace, name)
        if spec is None:
            raise NotFound(f"dataset {namespace}.{name} does not exist")
        return spec

    def observe(self, event: object) -> None:
        """Learn a dataset from the log (the launcher's catch-up at start), for `list`."""
        if isinstance(event, DatasetCreated):
            self._specs[(event.spec.namespace, event.spec.name)] = event.spec

    def list(self, namespace: str = "") -> list[DatasetSpec]:
        return sorted((s for s in self._specs.values() if not namespace or s.namespace == namespace),
                      key=lambda s: (s.namespace, s.name))

    # -- transactions --------------------------------------------------------------------------

    def next_position(self, namespace: str, name: str) -> int:
        """Every position below this one has begun."""
        return self._log.stream_version(positions_stream(namespace, name)) + 1

    def begin(self, namespace: str, name: str, owner: str = "") -> int:
        """Reserve the next position for a transaction that will commit or abort later."""
        spec = self.get(namespace, name)
        return self._begin(spec, owner, lambda position: [])

    def add(self, namespace: str, name: str, partitions: Sequence[Partition], owner: str = "") -> Transaction:
        """Begin and commit one transaction in a single append."""
        spec = self.get(namespace, name)
        now = self._clock.now()

        def committed_at_once(position: int) -> list:
            return decide_commit(spec, Transaction(position, TransactionStatus.OPEN), tuple(partitions), now)

        position = self._begin(spec, owner, committed_at_once)
        return self.transaction(namespace, name, position)

    def commit(self, namespace: str, name: str, position: int, partitions: Sequence[Partition]) -> Transaction:
        """Commit the transaction at `position` (a no-op when it committed these partitions already)."""
        spec = self.get(namespace, name)
        return self._settle(spec, position, lambda current: decide_commit(spec, current, tuple(partitions),
                                                                           self._clock.now()))

    def prepare_commit(self, namespace: str, name: str, position: int,
                       partitions: Sequence[Partition]) -> StreamAppend | None:
        """The append that commits the transaction, for a caller that appends it together with its own
        events (a commit step and its marker); None when these partitions are committed already."""
        spec = self.get(namespace, name)
        if position >= self.next_position(namespace, name):
            raise NotFound(f"transaction {position} of dataset {spec.qualified_name} was never begun")
        current = self.transaction(namespace, name, position)
        events = decide_commit(spec, current, tuple(partitions), self._clock.now())
        stream = transaction_stream(namespace, name, position)
        return StreamAppend(stream, events_for(stream, 0, events), NO_STREAM) if events else None

    def prepare_begin(self, namespace: str, name: str, count: int, owner: str) -> tuple[list[int], StreamAppend]:
        """Positions for `count` new transactions and the append that begins them, for a caller that
        appends it together with its own events (it conflicts if another writer begins first)."""
        spec = self.get(namespace, name)
        stream = positions_stream(namespace, name)
        version = self._log.stream_version(stream)
        positions = list(range(version + 1, version + 1 + count))
        started = [TransactionStarted(spec.namespace, spec.name, p, owner, self._clock.now()) for p in positions]
        return positions, StreamAppend(stream, events_for(stream, version + 1, started), version)

    def abort(self, namespace: str, name: str, position: int, reason: str) -> Transaction:
        spec = self.get(namespace, name)
        return self._settle(spec, position, lambda current: decide_abort(spec, current, reason, self._clock.now()))

    def transaction(self, namespace: str, name: str, position: int) -> Transaction:
        stream = transaction_stream(namespace, name, position)
        return outcome_of(position, [decode_event(TYPES, r) for r in self._log.read_stream(stream)])

    def transactions(self, namespace: str, name: str, positions: Iterable[int]) -> list[Transaction]:
        return [self.transaction(namespace, name, position) for position in positions]

    def _begin(self, spec: DatasetSpec, owner: str, outcome) -> int:
        stream = positions_stream(spec.namespace, spec.name)

        def attempt() -> int:  # a lost race for the position is decided again on the next one
            version = self._log.stream_version(stream)
            position = version + 1
            started = TransactionStarted(spec.namespace, spec.name, position, owner, self._clock.now())
            appends = [StreamAppend(stream, events_for(stream, position, [started]), version)]
            decided = outcome(position)
            if decided:
                outcome_stream = transaction_stream(spec.namespace, spec.name, position)
                appends.append(StreamAppend(outcome_stream, events_for(outcome_stream, 0, decided), NO_STREAM))
            self._log.append_batch(appends)
            return position

        return retry_on_conflict(attempt, reload_nothing, attempts=MAX_CONFLICTS,
                                 what=f"dataset {spec.qualified_name}: beginning a transaction")

    def _settle(self, spec: DatasetSpec, position: int, decide) -> Transaction:
        if not isinstance(position, int) or isinstance(position, bool) or position < 0:
            raise InvalidArgument("position", f"must be a whole number >= 0, got {position!r}")
        if position >= self.next_position(spec.namespace, spec.name):
            raise NotFound(f"transaction {position} of dataset {spec.qualified_name} was never begun")
        stream = transaction_stream(spec.namespace, spec.name, position)

        def attempt() -> Transaction:
            current = self.transaction(spec.namespace, spec.name, position)
            events = decide(current)
            if not events:
                return current
            self._log.append(stream, events_for(stream, 0, events), NO_STREAM)
            return self.transaction(spec.namespace, spec.name, position)

        # an outcome is written once: a lost race is decided again on the winner's
        return retry_on_conflict(attempt, reload_nothing, attempts=2,
                                 what=f"transaction {position} of {spec.qualified_name}: outcome")

    # -- queries -------------------------------------------------------------------------------

    def query(self, namespace: str, name: str, query: PartitionQuery = PartitionQuery()) -> list[IndexedPartition]:
        """Committed partitions in position order that match the query, at most `query.limit`."""
        spec = self.get(namespace, name)
        if not isinstance(query.limit, int) or query.limit < 1 or query.limit > MAX_QUERY_LIMIT:
            raise InvalidArgument("limit", f"must be between 1 and {MAX_QUERY_LIMIT}, got {query.limit!r}")
        where = validate_filter(spec, query.where)
        found: list[IndexedPartition] = []
        start = query.after.position if query.after else 0
        for position in range(start, self.next_position(namespace, name)):
            transaction = self.transaction(namespace, name, position)
            if transaction.status is not TransactionStatus.COMMITTED or not _in_time(query, transaction.committed_at):
                continue
            for index, partition in enumerate(transaction.partitions):
                partition_id = PartitionId(position, index)
                if query.after is not None and partition_id <= query.after:
                    continue
                if where.empty or where.matches(spec, partition.key, partition.metadata):
                    found.append(IndexedPartition(partition_id, partition, transaction.committed_at))
                    if len(found) == query.limit:
                        return found
        return found


def _in_time(query: PartitionQuery, committed_at: datetime | None) -> bool:
    assert committed_at is not None
    return ((query.committed_after is None or committed_at >= query.committed_after)
            and (query.committed_before is None or committed_at < query.committed_before))
