"""What a pending job has accumulated towards its trigger: pure `start` and `observe`."""
from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from sluice.domain.common import Notification, PartitionCommitted, ProgramStatusChanged
from sluice.domain.triggers.specs import (
    DatasetLeaf,
    DataSizeTrigger,
    Leaf,
    PartitionTrigger,
    ProgramStatusTrigger,
    QuietPeriodTrigger,
    Trigger,
    leaves,
    partition_matches,
    require_aware,
)


@dataclass(frozen=True, slots=True)
class LeafState:
    """One leaf's progress. Which fields a leaf uses depends on its kind."""

    notification_ids: tuple[str, ...] = ()
    """The notifications this leaf matched, in arrival order."""
    count: int = 0
    """Matching partitions (partition, data size, quiet period) or distinct runs (program status)."""
    size_bytes: int = 0
    """Sum of the matching partitions' sizes."""
    last_event_at: datetime | None = None
    """When the matcher observed the last matching notification (quiet period)."""
    run_ids: tuple[str, ...] = ()
    """Runs counted by a program-status leaf: a run is counted once however often it is announced."""


_NOTHING_YET = LeafState()
"""Every leaf of a new job starts here: one object (it is immutable) instead of one per leaf and job."""


@dataclass(frozen=True, slots=True)
class TriggerState:
    """A pending job's progress towards its trigger; serializable by the codec.

    `leaves[i]` belongs to the i-th leaf of the trigger in depth-first order."""

    started_at: datetime
    """When the job started waiting: where elapsed triggers count from, and the exclusive start
    of the window in which a cron fire satisfies a time trigger."""
    leaves: tuple[LeafState, ...]
    notifications: tuple[Notification, ...] = ()
    """Every notification some leaf matched, each once, in arrival order."""


def start(trigger: Trigger, now: datetime) -> TriggerState:
    """The state of a job that starts waiting at `now`. To catch up missed cron fires one job
    per fire, start the next job at the previous job's logical time instead of `now`."""
    require_aware(now)
    return TriggerState(now, _nothing_yet(len(leaves(trigger))))


_NOTHING_YET_BY_COUNT: dict[int, tuple[LeafState, ...]] = {}
"""The leaves of a new job by their number: one tuple per number of leaves, shared by every new job."""


def _nothing_yet(count: int) -> tuple[LeafState, ...]:
    found = _NOTHING_YET_BY_COUNT.get(count)
    if found is None:
        found = _NOTHING_YET_BY_COUNT[count] = (_NOTHING_YET,) * count
    return found


def observe(trigger: Trigger, state: TriggerState, notification: Notification, now: datetime) -> TriggerState:
    """Account for a notification the matcher received at `now`.

    Returns `state` itself when nothing changed: the notification matches no leaf, or it was
    already observed (same id), or it announces a run a program-status leaf already counted."""
    require_aware(now)
    notification_id = notification.id
    for seen in state.notifications:
        if seen.id == notification_id:
            return state
    specs = leaves(trigger)
    _check_shape(specs, state)
    updated, changed = [], False
    for spec, leaf in zip(specs, state.leaves):
        new = _observe_leaf(spec, leaf, notification, now)
        if new is not leaf:
            changed = True
        updated.append(new)
    if not changed:
        return state
    return TriggerState(state.started_at, tuple(updated), (*state.notifications, notification))


def matched_notifications(trigger: Trigger, state: TriggerState) -> tuple[Notification, ...]:
    """The notifications to hand to the program, in arrival order. A partition notification keeps
    only the partitions some leaf that matched it admits (its filter), with keys and locations;
    a program-status notification is kept whole."""
    specs = leaves(trigger)
    _check_shape(specs, state)
    if not state.notifications:  # a fire by time alone
        return ()
    if not any(spec.filter for spec in specs if isinstance(spec, DatasetLeaf)):
        return state.notifications  # only a leaf that matched a notification holds it, and each takes every partition
    result = []
    for notification in state.notifications:
        payload = notification.payload
        if not isinstance(payload, PartitionCommitted):
            result.append(notification)
            continue
        filters = [spec.filter for spec, leaf in zip(specs, state.leaves)
                   if isinstance(spec, DatasetLeaf) and notification.id in leaf.notification_ids]
        kept = tuple(p for p in payload.partitions if any(partition_matches(f, p) for f in filters))
        if kept == payload.partitions:
            result.append(notification)
        elif kept:
            result.append(replace(notification, payload=replace(payload, partitions=kept)))
    return tuple(result)


def _check_shape(specs: tuple[Leaf, ...], state: TriggerState) -> None:
    if len(specs) != len(state.leaves):
        raise ValueError(f"trigger state has {len(state.leaves)} leaves, the trigger {len(specs)}: "
                         f"the state belongs to another trigger (start a new job when a schedule changes)")


_DATASET_LEAVES = (PartitionTrigger, DataSizeTrigger, QuietPeriodTrigger)


def _observe_leaf(spec: Leaf, leaf: LeafState, notification: Notification, now: datetime) -> LeafState:
    payload = notification.payload
    if isinstance(spec, _DATASET_LEAVES):
        if (not isinstance(payload, PartitionCommitted) or payload.dataset != spec.dataset
                or payload.namespace != spec.namespace):
            return leaf
        spec_filter = spec.filter
        matching = ([p for p in payload.partitions if partition_matches(spec_filter, p)] if spec_filter
                    else payload.partitions)
        if not matching:
            return leaf
        last = now if leaf.last_event_at is None else max(leaf.last_event_at, now)
        return LeafState((*leaf.notification_ids, notification.id), leaf.count + len(matching),
                         leaf.size_bytes + sum(p.size_bytes for p in matching), last, leaf.run_ids)
    match spec:
        case ProgramStatusTrigger():
            if not isinstance(payload, ProgramStatusChanged) or payload.status.value not in spec.statuses:
                return leaf
            if payload.program != spec.program_ref or payload.run_id in leaf.run_ids:
                return leaf
            return replace(leaf, notification_ids=(*leaf.notification_ids, notification.id),
                           count=leaf.count + 1, run_ids=(*leaf.run_ids, payload.run_id),
                           last_event_at=now)
    return leaf
