"""Reject a bad trigger with the exact path of the offending field."""
from __future__ import annotations

from typing import Callable, Mapping

from sluice.domain import bounds
from sluice.domain.common import ProgramRef
from sluice.domain.names import validate_name
from sluice.domain.triggers.cron import CronError, check_cron, zone_of
from sluice.domain.triggers.specs import (
    KINDS,
    TERMINAL_STATUSES,
    AndTrigger,
    DataSizeTrigger,
    ElapsedTrigger,
    OrTrigger,
    PartitionTrigger,
    ProgramStatusTrigger,
    QuietPeriodTrigger,
    TimeTrigger,
    children,
    leaves,
)
from sluice.domain.errors import InvalidArgument, ResourceExhausted

MAX_DEPTH = 32
"""How deeply AND/OR may nest: deeper than any real schedule, shallow enough for the stack."""

KnownProgram = Callable[[ProgramRef], bool]


def validate_trigger(trigger: object, path: str = "schedule.trigger", known_program: KnownProgram | None = None) -> None:
    """Raise InvalidArgument naming the field, e.g. "schedule.trigger.and.all_of[1].time.cron".

    `known_program`, when given, says whether a program exists: a program-status trigger on an
    unknown program is rejected."""
    _validate(trigger, path, known_program, depth=1)
    count = sum(1 for _ in leaves(trigger))
    if count > bounds.MAX_TRIGGER_LEAVES:
        raise ResourceExhausted(path, f"{count} triggers exceed the limit of {bounds.MAX_TRIGGER_LEAVES} per schedule")


def _validate(trigger: object, path: str, known_program: KnownProgram | None, depth: int) -> None:
    if trigger is None:
        raise InvalidArgument(path, f"a trigger is required (one of: {', '.join(KINDS.values())})")
    kind = KINDS.get(type(trigger))
    if kind is None:
        raise InvalidArgument(path, f"unknown trigger type {type(trigger).__name__}")
    here = f"{path}.{kind}"
    match trigger:
        case AndTrigger() | OrTrigger():
            _composite(trigger, here, known_program, depth)
        case TimeTrigger(cron, zone):
            _time(cron, zone, here)
        case PartitionTrigger(namespace, dataset, count, filter):
            _dataset(here, namespace, dataset, filter)
            _positive(f"{here}.count", count, bounds.MAX_TRIGGER_COUNT)
        case DataSizeTrigger(namespace, dataset, min_bytes, filter):
            _dataset(here, namespace, dataset, filter)
            _positive(f"{here}.min_bytes", min_bytes, bounds.MAX_BYTES)
        case QuietPeriodTrigger(namespace, dataset, quiet_seconds, filter):
            _dataset(here, namespace, dataset, filter)
            bounds.check_seconds(f"{here}.quiet_seconds", quiet_seconds, 1)
        case ElapsedTrigger(seconds):
            bounds.check_seconds(f"{here}.seconds", seconds, 1)
        case ProgramStatusTrigger():
            _program_status(trigger, here, known_program)


def _composite(trigger: AndTrigger | OrTrigger, here: str, known_program: KnownProgram | None, depth: int) -> None:
    field = f"{here}.{'all_of' if isinstance(trigger, AndTrigger) else 'any_of'}"
    if depth >= MAX_DEPTH:
        raise InvalidArgument(field, f"triggers may nest at most {MAX_DEPTH} levels deep")
    if not children(trigger):
        raise InvalidArgument(field, "must have at least one trigger")
    for index, child in enumerate(children(trigger)):
        _validate(child, f"{field}[{index}]", known_program, depth + 1)


def _time(cron: object, zone: object, here: str) -> None:
    if isinstance(cron, str):
        bounds.check_text(f"{here}.cron", cron, bounds.MAX_CRON_BYTES)
    try:
        check_cron(cron)
    except CronError as error:
        raise InvalidArgument(f"{here}.cron", str(error)) from None
    try:
        zone_of(zone)
    except CronError as error:
        raise InvalidArgument(f"{here}.zone", str(error)) from None


def _dataset(here: str, namespace: object, dataset: object, filter: Mapping) -> None:
    _name(f"{here}.namespace", namespace)
    _name(f"{here}.dataset", dataset)
    for key, allowed in filter.items():
        _name(f"{here}.filter", key)
        if len(allowed) > bounds.MAX_FILTER_VALUES:
            raise ResourceExhausted(f"{here}.filter[{key}]", f"{len(allowed)} values exceed the limit of "
                                                             f"{bounds.MAX_FILTER_VALUES}")
        if not allowed:
            raise InvalidArgument(f"{here}.filter[{key}]", "must list at least one allowed value "
                                  "(leave the key out to admit every value)")
        for index, value in enumerate(allowed):
            if not isinstance(value, str):
                raise InvalidArgument(f"{here}.filter[{key}][{index}]", f"must be a string, got {value!r}")
            bounds.check_text(f"{here}.filter[{key}][{index}]", value, bounds.MAX_KEY_VALUE_BYTES)


def _program_status(trigger: ProgramStatusTrigger, here: str, known_program: KnownProgram | None) -> None:
    _name(f"{here}.namespace", trigger.namespace)
    _name(f"{here}.app", trigger.app)
    _name(f"{here}.program", trigger.program)
    if not trigger.statuses:
        raise InvalidArgument(f"{here}.statuses", f"must list at least one of {', '.join(TERMINAL_STATUSES)}")
    for index, status in enumerate(trigger.statuses):
        if status not in TERMINAL_STATUSES:
            raise InvalidArgument(f"{here}.statuses[{index}]",
                                  f"must be one of {', '.join(TERMINAL_STATUSES)}, got {status!r}")
    if len(set(trigger.statuses)) != len(trigger.statuses):
        raise InvalidArgument(f"{here}.statuses", "must not repeat a status")
    _positive(f"{here}.count", trigger.count, bounds.MAX_TRIGGER_COUNT)
    if known_program is not None and not known_program(trigger.program_ref):
        raise InvalidArgument(f"{here}.program", f"unknown program {trigger.program_ref.qualified()}")


def _positive(path: str, value: object, maximum: int) -> None:
    bounds.check_int(path, value, 1, maximum)


def _name(path: str, value: object) -> None:
    validate_name(path, value)  # the identifier rule: sluice.domain.names
