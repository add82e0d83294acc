"""Schedules, waiting jobs and run errors in words, for the CLI's tables."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Mapping

from google.protobuf import timestamp_pb2

from sluice.v1 import notifications_pb2, schedules_pb2


def trigger_text(trigger: schedules_pb2.Trigger) -> str:
    """The trigger, short: `partition experiments.hourly x24`, `time '0 2 * * *' Asia/Tokyo`, ..."""
    kind = trigger.WhichOneof("kind")
    value = getattr(trigger, kind) if kind else None
    match kind:
        case "partition":
            return f"partition {value.namespace}.{value.dataset} x{value.count}"
        case "time":
            return f"time '{value.cron}' {value.zone}"
        case "data_size":
            return f"data-size {value.namespace}.{value.dataset} >= {value.min_bytes} B"
        case "quiet_period":
            return f"quiet {value.namespace}.{value.dataset} {value.quiet_seconds}s"
        case "elapsed":
            return f"elapsed {value.seconds}s"
        case "program_status":
            return f"status {value.namespace}.{value.app}.{value.program} x{value.count}"
        case "and" | "or":
            children = value.all_of if kind == "and" else value.any_of
            return f" {kind.upper()} ".join(f"({trigger_text(t)})" for t in children)
    return "?"


def waiting_for(trigger: schedules_pb2.Trigger, created_at: timestamp_pb2.Timestamp,
                last_match: timestamp_pb2.Timestamp, matched: int = 0,
                partitions: Mapping[tuple[str, str], int] | None = None) -> str:
    """What a PENDING_TRIGGER job waits for, from its schedule's trigger: `1 of 2 partitions of
    experiments.clickstream`, `cron at 02:00 Asia/Tokyo`, `quiet until 10:42:05 (...)`. `last_match`:
    when a notification last joined the job (its last update); `partitions`: the partitions its
    notifications carried per (namespace, dataset) (Job.partitions_matched), the progress of a partition
    trigger without a filter; `matched`: how many notifications it matched so far
    (Job.notifications_matched), appended as `; 1 notification so far` when no progress was shown."""
    progress = partitions or None  # none counted: unknown (a server without Job.partitions_matched)
    text = _waiting_for(trigger, created_at, last_match, progress)
    if not matched or any(_counted(leaf, progress) is not None for leaf in _leaves(trigger)):
        return text
    return f"{text}; {matched} notification{'s' if matched != 1 else ''} so far"


def _leaves(trigger: schedules_pb2.Trigger) -> list[schedules_pb2.Trigger]:
    kind = trigger.WhichOneof("kind")
    if kind in ("and", "or"):
        value = getattr(trigger, kind)
        return [leaf for child in (value.all_of if kind == "and" else value.any_of) for leaf in _leaves(child)]
    return [trigger]


def _counted(trigger: schedules_pb2.Trigger, progress: Mapping[tuple[str, str], int] | None) -> int | None:
    """A partition leaf's partitions so far, when they can be told (no filter: every partition counts)."""
    if progress is None or trigger.WhichOneof("kind") != "partition" or trigger.partition.filter:
        return None
    return progress.get((trigger.partition.namespace, trigger.partition.dataset), 0)


def _waiting_for(trigger: schedules_pb2.Trigger, created_at: timestamp_pb2.Timestamp,
                 last_match: timestamp_pb2.Timestamp, progress: Mapping[tuple[str, str], int] | None) -> str:
    kind = trigger.WhichOneof("kind")
    value = getattr(trigger, kind) if kind else None
    match kind:
        case "partition":
            counted = _counted(trigger, progress)
            so_far = f"{counted} of " if counted is not None else ""
            return f"{so_far}{value.count} partition{'s' if value.count != 1 else ''} of {value.namespace}.{value.dataset}"
        case "time":
            return f"cron {cron_text(value.cron)} {value.zone}"
        case "data_size":
            return f"{value.min_bytes} B of {value.namespace}.{value.dataset}"
        case "quiet_period":
            until = _plus(last_match or created_at, value.quiet_seconds)
            return f"quiet until {until} ({value.quiet_seconds}s without data of {value.namespace}.{value.dataset})"
        case "elapsed":
            return f"elapsed until {_plus(created_at, value.seconds)}"
        case "program_status":
            statuses = "/".join(notifications_pb2.RunStatus.Name(s) for s in value.statuses) or "COMPLETED"
            return f"{value.count} {statuses} run{'s' if value.count != 1 else ''} of " \
                   f"{value.namespace}.{value.app}.{value.program}"
        case "and" | "or":
            children = value.all_of if kind == "and" else value.any_of
            return f" {kind} ".join(f"({_waiting_for(t, created_at, last_match, progress)})" for t in children)
    return "?"


def cron_text(cron: str) -> str:
    """`at 02:00` for a daily cron (minute and hour fixed, the rest `*`), else the expression quoted."""
    fields = cron.split()
    if len(fields) == 5 and fields[2:] == ["*", "*", "*"] and fields[0].isdigit() and fields[1].isdigit():
        return f"at {int(fields[1]):02d}:{int(fields[0]):02d}"
    return f"'{cron}'"


def _plus(stamp: timestamp_pb2.Timestamp, seconds: int) -> str:
    when = datetime.fromtimestamp(stamp.seconds, timezone.utc) + timedelta(seconds=seconds)
    return when.strftime("%H:%M:%S") if when.date() == datetime.now(timezone.utc).date() else \
        when.strftime("%Y-%m-%d %H:%M:%S")


def error_lead(error: str) -> str:
    """A run's error with the line that says what went wrong first. The launcher writes
    `exit code N: <exception line> | <the log's tail>`; older errors (`exit code N: ... | File ... |
    ValueError: bad`) get their last `Name: message` part moved to the front."""
    head, colon, rest = error.partition(": ")
    if not colon or not head.startswith("exit code "):
        return error
    parts = [part.strip() for part in rest.split(" | ")]
    lead = exception_line(parts)
    if not lead or parts[0] == lead:
        return error
    return f"{head}: {lead} | {rest}"


def exception_line(lines: list[str]) -> str:
    """The last line naming an exception (`ValueError: bad input`, `pyspark...AnalysisException: ...`), or ""."""
    for line in reversed(lines):
        name, colon, _ = line.strip().partition(":")
        last = name.rpartition(".")[2]
        if colon and name and " " not in name and last[:1].isupper() and last.isidentifier() \
                and last.endswith(("Error", "Exception", "Exit", "Interrupt", "Warning")):
            return line.strip()
    return ""
