"""Trigger specifications: what a schedule waits for, as frozen, hashable, JSON-friendly data.

The codec (`sluice.eventlog.codec`) decodes a union of dataclasses by matching the set of field
names, so every kind below has a distinct set of field names (AND says `all_of`, OR says
`any_of`); `test_every_kind_has_its_own_field_names` keeps it that way. There is no `kind`
field: the codec could not tell AND from OR by a value, and a tag could disagree with its class.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Iterator, Mapping

from sluice.domain.common import PartitionRef, ProgramRef, RunStatus

TERMINAL_STATUSES = (RunStatus.COMPLETED.value, RunStatus.FAILED.value, RunStatus.KILLED.value)
"""The run statuses a program-status trigger may listen to."""


class FrozenMap(Mapping):
    """An immutable, hashable mapping (the frozen dataclasses' `filter` fields)."""

    __slots__ = ("_items", "_hash")

    def __init__(self, items: Mapping | None = None) -> None:
        self._items = dict(items or {})
        self._hash = hash(tuple(sorted(self._items.items())))

    def __getitem__(self, key):
        return self._items[key]

    def __iter__(self) -> Iterator:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"FrozenMap({self._items!r})"


_NO_FILTER = FrozenMap()


def _freeze_filter(obj: object) -> None:
    """Lists from JSON or callers become tuples, dicts become FrozenMaps: equal and hashable."""
    if not obj.filter:
        object.__setattr__(obj, "filter", _NO_FILTER)  # most triggers have none: one object for all
        return
    frozen = FrozenMap({key: _as_tuple(values) for key, values in obj.filter.items()})
    object.__setattr__(obj, "filter", frozen)


def _as_tuple(values: object) -> tuple:
    if isinstance(values, str):
        return (values,)
    return tuple(values)


def partition_matches(filter: Mapping[str, tuple[str, ...]], partition: PartitionRef) -> bool:
    """A partition matches when, for every filtered key, its value is one of the allowed ones."""
    if not filter:
        return True
    return all(partition.key.get(key) in allowed for key, allowed in filter.items())


@dataclass(frozen=True, slots=True)
class TimeTrigger:
    """Fires at each time of a cron expression (5 fields, or 6 with seconds first) in `zone`.

    The zone is always explicit (IANA name, default UTC), never the server's. DST policy: a
    wall-clock time skipped by spring-forward fires once at the first valid instant after the
    gap; a wall-clock time repeated by fall-back fires once, at its first occurrence."""

    cron: str
    zone: str = "UTC"


@dataclass(frozen=True, slots=True)
class PartitionTrigger:
    """Fires when `count` partitions of `namespace.dataset` matching `filter` have committed.

    `filter` maps a partition key to its allowed values; an empty filter admits every partition."""

    namespace: str
    dataset: str
    count: int = 1
    filter: Mapping[str, tuple[str, ...]] = field(default_factory=FrozenMap)

    def __post_init__(self) -> None:
        _freeze_filter(self)


@dataclass(frozen=True, slots=True)
class DataSizeTrigger:
    """Fires when the matching partitions of `namespace.dataset` sum to at least `min_bytes`."""

    namespace: str
    dataset: str
    min_bytes: int
    filter: Mapping[str, tuple[str, ...]] = field(default_factory=FrozenMap)

    def __post_init__(self) -> None:
        _freeze_filter(self)


@dataclass(frozen=True, slots=True)
class ProgramStatusTrigger:
    """Fires when `count` distinct runs of the program reached one of `statuses`
    (names among COMPLETED, FAILED, KILLED)."""

    namespace: str
    app: str
    program: str
    statuses: tuple[str, ...] = (RunStatus.COMPLETED.value,)
    count: int = 1

    def __post_init__(self) -> None:
        statuses = (self.statuses,) if isinstance(self.statuses, (str, RunStatus)) else self.statuses
        names = tuple(s.value if isinstance(s, RunStatus) else s for s in statuses)
        object.__setattr__(self, "statuses", names)

    @property
    def program_ref(self) -> ProgramRef:
        return ProgramRef(self.namespace, self.app, self.program)


@dataclass(frozen=True, slots=True)
class QuietPeriodTrigger:
    """Fires once at least one matching partition arrived and none arrived for `quiet_seconds`
    since the last one (the end of a burst of chunks). Measured on the matcher's clock when it
    observed each notification, so catching up a backlog can fire late but never mid-burst."""

    namespace: str
    dataset: str
    quiet_seconds: int
    filter: Mapping[str, tuple[str, ...]] = field(default_factory=FrozenMap)

    def __post_init__(self) -> None:
        _freeze_filter(self)


@dataclass(frozen=True, slots=True)
class ElapsedTrigger:
    """Fires when `seconds` have passed since the job started waiting."""

    seconds: int


@dataclass(frozen=True, slots=True)
class AndTrigger:
    """Fires when all of its children are satisfied at the same time."""

    all_of: tuple[Trigger, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "all_of", tuple(self.all_of))


@dataclass(frozen=True, slots=True)
class OrTrigger:
    """Fires when any of its children is satisfied."""

    any_of: tuple[Trigger, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "any_of", tuple(self.any_of))


Trigger = (TimeTrigger | PartitionTrigger | DataSizeTrigger | ProgramStatusTrigger | QuietPeriodTrigger
           | ElapsedTrigger | AndTrigger | OrTrigger)
Leaf = TimeTrigger | PartitionTrigger | DataSizeTrigger | ProgramStatusTrigger | QuietPeriodTrigger | ElapsedTrigger
DatasetLeaf = PartitionTrigger | DataSizeTrigger | QuietPeriodTrigger

KINDS: dict[type, str] = {
    TimeTrigger: "time",
    PartitionTrigger: "partition",
    DataSizeTrigger: "data_size",
    ProgramStatusTrigger: "program_status",
    QuietPeriodTrigger: "quiet_period",
    ElapsedTrigger: "elapsed",
    AndTrigger: "and",
    OrTrigger: "or",
}
"""Each kind's name in field paths ("schedule.trigger.and.all_of[1].time.cron") and on the wire."""


def children(trigger: Trigger) -> tuple[Trigger, ...]:
    if isinstance(trigger, AndTrigger):
        return trigger.all_of
    if isinstance(trigger, OrTrigger):
        return trigger.any_of
    return ()


def leaves(trigger: Trigger) -> tuple[Leaf, ...]:
    """The leaves in depth-first order: a leaf's position is its index in TriggerState.leaves."""
    if isinstance(trigger, AndTrigger):
        kids = trigger.all_of
    elif isinstance(trigger, OrTrigger):
        kids = trigger.any_of
    else:
        return (trigger,)
    for kid in kids:
        if isinstance(kid, (AndTrigger, OrTrigger)):  # nested: flatten every child, not just this one
            return tuple(leaf for child in kids for leaf in leaves(child))
    return kids  # children that are all leaves (the usual composite): its own tuple, nothing built


def event_key(trigger: Leaf) -> tuple[str, ...]:
    match trigger:
        case PartitionTrigger() | DataSizeTrigger() | QuietPeriodTrigger():
            return (f"partition:{trigger.namespace}.{trigger.dataset}",)
        case ProgramStatusTrigger():
            prefix = f"program:{trigger.namespace}.{trigger.app}.{trigger.program}"
            return tuple(f"{prefix}.{status}" for status in trigger.statuses)
    return ()


def event_keys(trigger: Trigger) -> frozenset[str]:
    """The notification event keys the trigger listens to (the matcher's reverse index).
    Time and elapsed triggers listen to none: they are driven by the timer (`wake_at`)."""
    return frozenset(key for leaf in leaves(trigger) for key in event_key(leaf))


def time_alone_can_satisfy(trigger: Trigger) -> bool:
    """Whether the trigger can fire with no notification at all (time and elapsed leaves, combined
    so): the matcher then keeps a job waiting from the moment the schedule is enabled; otherwise
    a job starts waiting at the first notification that matches it."""
    match trigger:
        case AndTrigger(all_of):
            return all(time_alone_can_satisfy(child) for child in all_of)
        case OrTrigger(any_of):
            return any(time_alone_can_satisfy(child) for child in any_of)
    return isinstance(trigger, (TimeTrigger, ElapsedTrigger))


def require_aware(value: datetime) -> datetime:
    """Reject naive datetimes: the domain never guesses a zone (and never reads the clock)."""
    zone = value.tzinfo
    if zone is timezone.utc:  # the usual zone: nothing to ask it
        return value
    if zone is None or value.utcoffset() is None:
        raise ValueError(f"a time-zone-aware datetime is required, got {value!r}")
    return value
