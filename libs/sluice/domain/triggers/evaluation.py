"""Is a pending job's trigger satisfied at `now`, and when should the matcher look again?"""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Iterator, NamedTuple

from sluice.domain.triggers.cron import next_fire
from sluice.domain.triggers.specs import (
    AndTrigger,
    DataSizeTrigger,
    ElapsedTrigger,
    OrTrigger,
    PartitionTrigger,
    ProgramStatusTrigger,
    QuietPeriodTrigger,
    TimeTrigger,
    Trigger,
    leaves,
    require_aware,
)
from sluice.domain.triggers.state import LeafState, TriggerState


class Evaluation(NamedTuple):
    """A tuple: one is made per leaf and evaluation (each timer's check, each wake-up time)."""

    satisfied: bool
    wake_at: datetime | None = None
    """When unsatisfied: the instant at which time alone makes it satisfied (cron fire, end of a
    quiet period, end of an elapsed wait), or None when only a notification can. Once satisfied
    nothing un-satisfies it by time alone, so it is None then too. One timer per job suffices."""
    logical_time: datetime | None = None
    """When satisfied: the cron fire time behind it. A time leaf gives its first fire in the
    window; AND gives the latest of its children's (the fire that completed it), OR the earliest
    of its satisfied children's (the fire that satisfied it first). None when no time leaf
    contributed: the matcher then uses the instant it found the trigger satisfied."""


NOT_YET = Evaluation(False)
SATISFIED = Evaluation(True)


def evaluate(trigger: Trigger, state: TriggerState, now: datetime) -> Evaluation:
    """Pure: the same trigger, state and `now` always give the same evaluation."""
    require_aware(now)
    if len(state.leaves) != len(leaves(trigger)):
        raise ValueError("the trigger state belongs to another trigger (start a new job when a schedule changes)")
    return _evaluate(trigger, iter(state.leaves), state.started_at, now)


def _evaluate(trigger: Trigger, states: Iterator[LeafState], started_at: datetime, now: datetime) -> Evaluation:
    kind = type(trigger)
    if kind is PartitionTrigger:  # the common leaves, without the dispatch below
        return SATISFIED if next(states).count >= trigger.count else NOT_YET
    if kind is TimeTrigger:
        next(states)
        fire = next_fire(trigger, started_at)
        return Evaluation(True, None, fire) if fire <= now else Evaluation(False, fire)
    if kind is AndTrigger:
        return _all([_evaluate(child, states, started_at, now) for child in trigger.all_of])
    if kind is OrTrigger:
        return _any([_evaluate(child, states, started_at, now) for child in trigger.any_of])
    return _leaf(trigger, next(states), started_at, now)


def _all(results: list[Evaluation]) -> Evaluation:
    waiting = [r for r in results if not r.satisfied]
    if not waiting:
        return Evaluation(True, None, _latest(r.logical_time for r in results))
    wakes = [r.wake_at for r in waiting]
    return NOT_YET if None in wakes else Evaluation(False, max(wakes))


def _any(results: list[Evaluation]) -> Evaluation:
    satisfied = [r for r in results if r.satisfied]
    if satisfied:
        times = [r.logical_time for r in satisfied if r.logical_time is not None]
        return Evaluation(True, None, min(times) if times else None)
    wakes = [r.wake_at for r in results if r.wake_at is not None]
    return Evaluation(False, min(wakes) if wakes else None)


def _latest(times) -> datetime | None:
    present = [t for t in times if t is not None]
    return max(present) if present else None


def _leaf(trigger: Trigger, leaf: LeafState, started_at: datetime, now: datetime) -> Evaluation:
    match trigger:
        case TimeTrigger():
            fire = next_fire(trigger, started_at)
            return Evaluation(True, None, fire) if fire <= now else Evaluation(False, fire)
        case PartitionTrigger(count=count):
            return SATISFIED if leaf.count >= count else NOT_YET
        case DataSizeTrigger(min_bytes=min_bytes):
            return SATISFIED if leaf.size_bytes >= min_bytes else NOT_YET
        case ProgramStatusTrigger(count=count):
            return SATISFIED if leaf.count >= count else NOT_YET
        case QuietPeriodTrigger(quiet_seconds=quiet):
            if leaf.last_event_at is None:
                return NOT_YET
            return _after(leaf.last_event_at + timedelta(seconds=quiet), now)
        case ElapsedTrigger(seconds=seconds):
            return _after(started_at + timedelta(seconds=seconds), now)
    raise TypeError(f"unknown trigger {trigger!r}")


def _after(end: datetime, now: datetime) -> Evaluation:
    return SATISFIED if now >= end else Evaluation(False, end)
