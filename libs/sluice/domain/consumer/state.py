"""The partition consumer's state (seeds 003/004): where it has read the index, and its working set.

    high_water_mark   every position below it has been looked at (the seed's read pointer + 1)...
    in_flight         ...except these: their transactions were still open (or did not fit in the
                      working set), so they are looked up again on every call until resolved.
    working_set       partitions found and not finished: AVAILABLE to take, or IN_PROGRESS by a taker.
    history           the last finished partitions (COMPLETED or DISCARDED), newest last.

Invariant: every position below the high-water mark is either resolved (its partitions went into
the working set, were filtered out, or it was aborted) or listed in `in_flight`. So a transaction
that commits after a later one was consumed is still found: it is never skipped.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from functools import total_ordering

from sluice.domain import bounds
from sluice.domain.datasets.filters import MATCH_ALL, PartitionFilter
from sluice.domain.datasets.specs import Partition, validate_name
from sluice.domain.errors import InvalidArgument

DEFAULT_MAX_WORKING_SET = 10_000
DEFAULT_MAX_RETRIES = 3
DEFAULT_TIMEOUT_SECONDS = 3600
DEFAULT_HISTORY_SIZE = 100


@total_ordering
@dataclass(frozen=True)
class PartitionId:
    """A partition's place in the index: its transaction's position and its index in that transaction."""

    position: int
    index: int

    def __lt__(self, other: PartitionId) -> bool:
        return (self.position, self.index) < (other.position, other.index)

    def __str__(self) -> str:
        return f"{self.position}.{self.index}"

    @classmethod
    def parse(cls, text: str, path: str = "id") -> PartitionId:
        position, dot, index = text.partition(".")
        if not dot or not position.isdigit() or not index.isdigit():
            raise InvalidArgument(path, f"a partition id is POSITION.INDEX, e.g. 12.0, got {text!r}")
        return cls(int(position), int(index))


class WorkStatus(enum.Enum):
    """A partition in the working set."""

    AVAILABLE = "AVAILABLE"
    """Found and waiting to be taken (new, failed and to be retried, timed out, or returned)."""
    IN_PROGRESS = "IN_PROGRESS"
    """Taken by one taker (a run); nobody else gets it until it completes, fails, times out or returns it."""


class Outcome(enum.Enum):
    """How a partition left the working set."""

    COMPLETED = "COMPLETED"
    """Its taker processed it successfully."""
    DISCARDED = "DISCARDED"
    """It failed (or timed out) more often than the consumer retries."""


@dataclass(frozen=True)
class WorkItem:
    id: PartitionId
    partition: Partition
    committed_at: datetime
    status: WorkStatus = WorkStatus.AVAILABLE
    failures: int = 0
    taken_by: str = ""
    taken_at: datetime | None = None


@dataclass(frozen=True)
class HistoryRecord:
    id: PartitionId
    key: dict[str, str]
    outcome: Outcome
    at: datetime
    taken_by: str = ""
    failures: int = 0


@dataclass(frozen=True)
class ConsumerConfig:
    """How a consumer takes partitions. Changing it applies from the next call on."""

    max_working_set: int = DEFAULT_MAX_WORKING_SET
    """At most this many partitions are AVAILABLE or IN_PROGRESS; the index is read no further until
    some finish. (One transaction larger than this enters whole when the working set is empty.)"""
    max_retries: int = DEFAULT_MAX_RETRIES
    """A partition that failed (or timed out) more than this many times is discarded."""
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS
    """An IN_PROGRESS partition taken longer ago than this counts as failed; 0: never."""
    start: datetime | None = None
    """Only partitions committed at or after this time (None: from the beginning)."""
    end: datetime | None = None
    """Only partitions committed before this time (None: no end)."""
    where: PartitionFilter = MATCH_ALL
    """Partitions that do not match are left out entirely (CDAP's partition filter)."""
    history_size: int = DEFAULT_HISTORY_SIZE
    """How many finished partitions the state remembers (the event log keeps them all)."""

    def in_time_bounds(self, committed_at: datetime) -> bool:
        return (self.start is None or committed_at >= self.start) and (self.end is None or committed_at < self.end)


@dataclass(frozen=True)
class ConsumerRef:
    namespace: str
    dataset: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}.{self.dataset}:{self.name}"


def consumer_stream(ref: ConsumerRef) -> str:
    return f"consumer-{ref.namespace}.{ref.dataset}-{ref.name}"


def snapshot_stream(ref: ConsumerRef) -> str:
    return f"snapshot-consumer-{ref.namespace}.{ref.dataset}-{ref.name}"


@dataclass(frozen=True)
class ConsumerState:
    consumer: ConsumerRef
    config: ConsumerConfig = field(default_factory=ConsumerConfig)
    high_water_mark: int = 0
    in_flight: tuple[int, ...] = ()
    working_set: tuple[WorkItem, ...] = ()
    history: tuple[HistoryRecord, ...] = ()

    def items(self) -> dict[PartitionId, WorkItem]:
        return {item.id: item for item in self.working_set}

    def count(self, status: WorkStatus) -> int:
        return sum(1 for item in self.working_set if item.status is status)

    def was_handed_out(self, partition: PartitionId) -> bool:
        """Whether the partition's position has been resolved (read into the working set or past it)."""
        return partition.position < self.high_water_mark and partition.position not in self.in_flight


def validate_ref(ref: ConsumerRef, path: str = "consumer") -> ConsumerRef:
    validate_name(f"{path}.namespace", ref.namespace)
    validate_name(f"{path}.dataset", ref.dataset)
    validate_name(f"{path}.name", ref.name)
    return ref


def validate_config(config: ConsumerConfig, path: str = "config") -> ConsumerConfig:
    bounds.check_int(f"{path}.max_working_set", config.max_working_set, 1, bounds.MAX_WORKING_SET)
    bounds.check_int(f"{path}.max_retries", config.max_retries, 0, bounds.MAX_RETRIES)
    bounds.check_seconds(f"{path}.timeout_seconds", config.timeout_seconds, 0)
    bounds.check_int(f"{path}.history_size", config.history_size, 0, bounds.MAX_COUNT)
    for name in ("start", "end"):
        value = getattr(config, name)
        if value is not None and (not isinstance(value, datetime) or value.tzinfo is None):
            raise InvalidArgument(f"{path}.{name}", f"must be a time with a zone, got {value!r}")
        if value is not None:
            bounds.check_time(f"{path}.{name}", value)
    if config.start is not None and config.end is not None and config.end <= config.start:
        raise InvalidArgument(f"{path}.end", f"must be after start ({config.start.isoformat()}), "
                                             f"got {config.end.isoformat()}")
    return config

