"""Topic names, one per message type (seed 000), and their keys.

| topic                          | message                  | key                                   |
|--------------------------------|--------------------------|---------------------------------------|
| sluice.notifications.partition | Notification             | partition:<ns>.<dataset>              |
| sluice.notifications.program   | Notification             | program:<ns>.<app>.<program>.<status> |
| sluice.notifications.time      | Notification             | schedule id                           |
| sluice.schedules               | ScheduleChanged          | schedule id (compacted)               |
| sluice.matches                 | MatchRequested           | schedule id                           |
| sluice.jobs                    | JobTriggered             | schedule id                           |
| sluice.launch-requests         | LaunchRequested          | job id                                |
| sluice.lineage                 | OpenLineage RunEvent JSON| run id                                |
| sluice.dead-letter             | original bytes           | original key; headers carry the reason|
"""
from __future__ import annotations

from sluice.bus.port import TopicSpec

PARTITION_NOTIFICATIONS = "sluice.notifications.partition"
PROGRAM_NOTIFICATIONS = "sluice.notifications.program"
TIME_NOTIFICATIONS = "sluice.notifications.time"
SCHEDULES = "sluice.schedules"
MATCHES = "sluice.matches"
JOBS = "sluice.jobs"
LAUNCH_REQUESTS = "sluice.launch-requests"
LINEAGE = "sluice.lineage"
DEAD_LETTER = "sluice.dead-letter"

DEFAULT_PARTITIONS = 4
MATCHES_PARTITIONS = DEFAULT_PARTITIONS
"""The matcher's first stage groups a notification's schedules by the partition they own."""

ALL_TOPICS: tuple[TopicSpec, ...] = (
    TopicSpec(PARTITION_NOTIFICATIONS, DEFAULT_PARTITIONS),
    TopicSpec(PROGRAM_NOTIFICATIONS, DEFAULT_PARTITIONS),
    TopicSpec(TIME_NOTIFICATIONS, DEFAULT_PARTITIONS),
    TopicSpec(SCHEDULES, DEFAULT_PARTITIONS, compacted=True),
    TopicSpec(MATCHES, MATCHES_PARTITIONS),  # as many partitions as SCHEDULES: one member owns a schedule in both
    TopicSpec(JOBS, DEFAULT_PARTITIONS),
    TopicSpec(LAUNCH_REQUESTS, DEFAULT_PARTITIONS),
    TopicSpec(LINEAGE, DEFAULT_PARTITIONS),
    TopicSpec(DEAD_LETTER, 1),
)


def partition_event_key(namespace: str, dataset: str) -> str:
    return f"partition:{namespace}.{dataset}"


def program_event_key(namespace: str, app: str, program: str, status: str) -> str:
    return f"program:{namespace}.{app}.{program}.{status}"
