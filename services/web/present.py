"""Protobuf messages in words for the console's pages: triggers, times, durations, rows, and the
lineage graph laid out for inline SVG. Pure functions of their arguments (the time is passed in)."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Iterable, Sequence
from urllib.parse import urlsplit

from google.protobuf import timestamp_pb2

from sluice.domain.triggers.cron import CronError, next_fire
from sluice.domain.triggers.specs import TimeTrigger
from sluice.v1 import jobs_pb2, lineage_pb2, notifications_pb2, runs_pb2, schedules_pb2


def when(stamp: timestamp_pb2.Timestamp) -> str:
    if not stamp.seconds and not stamp.nanos:
        return ""
    return stamp.ToDatetime(tzinfo=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def seconds_text(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def run_duration(run: runs_pb2.Run, now: datetime) -> str:
    if not run.started_at.seconds:
        return ""
    start = run.started_at.ToDatetime(tzinfo=timezone.utc)
    end = run.ended_at.ToDatetime(tzinfo=timezone.utc) if run.ended_at.seconds else now
    text = seconds_text(max(0.0, (end - start).total_seconds()))
    return text if run.ended_at.seconds else f"{text} so far"


def run_rows(run: runs_pb2.Run) -> int:
    return sum(output.partition.record_count for output in run.outputs)


def link_target(url: str) -> str:
    """`url` if a browser may follow it as a plain link (http or https with a host), else "": a driver
    reports its UI's address, and a `javascript:` or `data:` one must not become a link."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return ""
    return url if parts.scheme in ("http", "https") and parts.hostname else ""


def status_name(value: int) -> str:
    return notifications_pb2.RunStatus.Name(value) if value in notifications_pb2.RunStatus.values() else str(value)


def job_state(value: int) -> str:
    return jobs_pb2.JobState.Name(value) if value in jobs_pb2.JobState.values() else str(value)


def program_name(program: notifications_pb2.ProgramRef) -> str:
    return f"{program.namespace}.{program.app}.{program.program}"


def key_text(key: Iterable[notifications_pb2.KeyValue]) -> str:
    return ", ".join(f"{kv.name}={kv.value}" for kv in key)


BYTES_SHOWN = 2000


def bytes_text(data: bytes) -> str:
    """Bytes as UTF-8 text where they are (JSON events, messages), else hex; cut at BYTES_SHOWN characters."""
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        text = "0x" + bytes(data).hex()
    return text if len(text) <= BYTES_SHOWN else text[:BYTES_SHOWN - 1] + "…"


def _filter_text(filter_) -> str:
    if not filter_:
        return ""
    parts = [f"{key} in {'/'.join(allowed.values)}" for key, allowed in sorted(filter_.items())]
    return f" where {' and '.join(parts)}"


def _plural(count: int, one: str, many: str | None = None) -> str:
    return f"{count} {one if count == 1 else (many or one + 's')}"


def trigger_words(trigger: schedules_pb2.Trigger) -> str:
    """The trigger as an operator says it, e.g. "every day at 02:00 (cron 0 2 * * *, Asia/Tokyo)"."""
    kind = trigger.WhichOneof("kind")
    if kind == "partition":
        t = trigger.partition
        return (f"{_plural(max(t.count, 1), 'new partition')} of {t.namespace}.{t.dataset}"
                f"{_filter_text(t.filter)}")
    if kind == "time":
        zone = trigger.time.zone or "UTC"
        words = cron_words(trigger.time.cron)
        return f"{words} {zone} (cron {trigger.time.cron})" if words else f"at cron {trigger.time.cron} ({zone})"
    if kind == "data_size":
        t = trigger.data_size
        return f"{t.min_bytes:,} bytes of new data in {t.namespace}.{t.dataset}{_filter_text(t.filter)}"
    if kind == "program_status":
        t = trigger.program_status
        statuses = "/".join(status_name(s) for s in t.statuses) or "COMPLETED"
        return f"{_plural(max(t.count, 1), 'run')} of {t.namespace}.{t.app}.{t.program} {statuses}"
    if kind == "quiet_period":
        t = trigger.quiet_period
        return f"{seconds_text(t.quiet_seconds)} quiet after new data in {t.namespace}.{t.dataset}{_filter_text(t.filter)}"
    if kind == "elapsed":
        return f"{seconds_text(trigger.elapsed.seconds)} elapsed"
    if kind in ("and", "or"):
        parts = getattr(trigger, "and").all_of if kind == "and" else getattr(trigger, "or").any_of
        return f" {kind.upper()} ".join(f"({trigger_words(part)})" for part in parts)
    return "no trigger"


WEEKDAYS = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def cron_words(expression: str) -> str:
    """Common 5-field crons in words ("every day at 02:00"); empty for the others."""
    fields = expression.split()
    if len(fields) != 5 or not all(f.isdigit() or f == "*" or (f.startswith("*/") and f[2:].isdigit())
                                   for f in fields):
        return ""
    minute, hour, day, month, weekday = fields
    if minute.startswith("*/") and hour == day == month == weekday == "*":
        return f"every {minute[2:]} minutes"
    if not minute.isdigit() or month != "*":
        return ""
    if hour == "*" and day == weekday == "*":
        return f"every hour at :{int(minute):02d}"
    if not hour.isdigit():
        return ""
    at = f"at {int(hour):02d}:{int(minute):02d}"
    if day == weekday == "*":
        return f"every day {at}"
    if day == "*" and weekday.isdigit() and int(weekday) < len(WEEKDAYS):
        return f"every {WEEKDAYS[int(weekday)]} {at}"
    if weekday == "*" and day.isdigit():
        return f"on day {int(day)} of every month {at}"
    return ""


def time_leaves(trigger: schedules_pb2.Trigger) -> list[schedules_pb2.TimeTrigger]:
    kind = trigger.WhichOneof("kind")
    if kind == "time":
        return [trigger.time]
    if kind == "and":
        return [leaf for part in getattr(trigger, "and").all_of for leaf in time_leaves(part)]
    if kind == "or":
        return [leaf for part in getattr(trigger, "or").any_of for leaf in time_leaves(part)]
    return []


def next_fire_text(schedule: schedules_pb2.Schedule, now: datetime) -> str:
    """The next time a time trigger of the schedule fires; empty for schedules without one."""
    fires = []
    for leaf in time_leaves(schedule.trigger):
        try:
            fires.append(next_fire(TimeTrigger(leaf.cron, leaf.zone or "UTC"), now))
        except (CronError, ValueError):
            continue
    if not fires:
        return ""
    text = min(fires).strftime("%Y-%m-%d %H:%M UTC")
    return text if schedule.enabled else f"{text} (when enabled)"


# -- the lineage graph as inline SVG ------------------------------------------------------------

NODE_WIDTH, NODE_HEIGHT, COLUMN_GAP, ROW_GAP, MARGIN = 250, 34, 60, 18, 12


@dataclass(frozen=True)
class Box:
    id: str
    label: str
    kind: str
    x: int
    y: int
    focus: bool


@dataclass(frozen=True)
class Arrow:
    x1: int
    y1: int
    x2: int
    y2: int


@dataclass(frozen=True)
class Graph:
    boxes: tuple[Box, ...]
    arrows: tuple[Arrow, ...]
    width: int
    height: int


def node_label(node: lineage_pb2.LineageNode) -> str:
    if node.type == "JOB":
        return f"{node.job.namespace}:{node.job.name}"
    return f"{node.dataset_namespace}:{node.dataset_name}"


def layout(nodes: Sequence[lineage_pb2.LineageNode], edges: Sequence[lineage_pb2.LineageEdge],
           focus: str = "") -> Graph:
    """Columns by longest path from a source (cycles broken by visiting order), rows in id order."""
    ids = [node.id for node in nodes]
    known = set(ids)
    outgoing: dict[str, list[str]] = defaultdict(list)
    for edge in edges:
        if edge.origin in known and edge.destination in known:
            outgoing[edge.origin].append(edge.destination)
    column = {node_id: 0 for node_id in ids}
    for _ in range(len(ids)):  # Bellman-Ford style relaxation, bounded: terminates on cycles too
        changed = False
        for origin in ids:
            for destination in outgoing[origin]:
                if column[destination] < column[origin] + 1 and column[origin] + 1 < len(ids):
                    column[destination] = column[origin] + 1
                    changed = True
        if not changed:
            break
    rows: dict[int, int] = defaultdict(int)
    boxes = {}
    for node in sorted(nodes, key=lambda n: (column[n.id], n.id)):
        c, r = column[node.id], rows[column[node.id]]
        rows[c] += 1
        boxes[node.id] = Box(node.id, node_label(node), node.type.lower(), MARGIN + c * (NODE_WIDTH + COLUMN_GAP),
                             MARGIN + r * (NODE_HEIGHT + ROW_GAP), node.id == focus)
    arrows = tuple(Arrow(boxes[o].x + NODE_WIDTH, boxes[o].y + NODE_HEIGHT // 2, boxes[d].x, boxes[d].y + NODE_HEIGHT // 2)
                   for o in ids for d in outgoing[o])
    columns = max(column.values(), default=0) + 1
    height_rows = max(rows.values(), default=1)
    return Graph(tuple(boxes.values()), arrows, 2 * MARGIN + columns * NODE_WIDTH + (columns - 1) * COLUMN_GAP,
                 2 * MARGIN + height_rows * (NODE_HEIGHT + ROW_GAP))
