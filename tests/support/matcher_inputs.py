"""A MatcherService fed through its production bus handlers, as the consumer loop feeds it.

Schedule changes go in as ScheduleChanged records of the schedules topic; a notification goes in
as the lookup stage (services/matcher/lookup.py) would republish it: one MatchRequested record per
matches partition, naming the partition's interested schedules (enabled, and listening to the
notification's event key), with the notification's source position. Offsets are counted per topic
partition; `match` takes a source offset to replay a redelivery or a resend."""
from __future__ import annotations

import itertools
from collections import defaultdict

from sluice.bus.port import Record, kafka_partition
from sluice.bus.topics import MATCHES, MATCHES_PARTITIONS, PARTITION_NOTIFICATIONS, PROGRAM_NOTIFICATIONS, SCHEDULES
from sluice.domain.common import Notification, PartitionCommitted
from sluice.domain.schedules import Schedule
from sluice.domain.triggers import event_keys
from sluice.v1 import matching_pb2, schedules_pb2
from sluice.wire.common import notification_to_proto
from sluice.wire.schedules import schedule_to_proto
from sluice_services.matcher.service import MatcherService


class MatcherInputs:
    def __init__(self, matcher: MatcherService, schedules: dict[str, Schedule] | None = None) -> None:
        """`schedules`: the lookup's index to share with other inputs (matchers on one log)."""
        self.matcher = matcher
        self._handlers = matcher.handlers()
        self.schedules = {} if schedules is None else schedules
        self._offsets: dict[tuple[str, int], itertools.count] = defaultdict(itertools.count)
        self._sources: dict[str, itertools.count] = defaultdict(itertools.count)

    def to(self, matcher: MatcherService) -> MatcherInputs:
        """The same topics (schedules seen, offsets reached) feeding another matcher: a restarted one."""
        inputs = MatcherInputs(matcher, self.schedules)
        inputs._offsets, inputs._sources = self._offsets, self._sources
        return inputs

    async def observe(self, schedule_id: str, schedule: Schedule | None) -> None:
        """The registry published the schedule's change (None: it was deleted)."""
        change = schedules_pb2.ScheduleChanged(schedule_id=schedule_id, deleted=schedule is None)
        if schedule is not None:
            change.schedule.CopyFrom(schedule_to_proto(schedule))
            self.schedules[schedule_id] = schedule
        else:
            self.schedules.pop(schedule_id, None)
        await self.deliver([self._record(SCHEDULES, 0, schedule_id, change.SerializeToString())])

    async def match(self, notification: Notification, source_offset: int | None = None) -> None:
        """The notification, as the lookup stage republishes it, at `source_offset` of its topic
        (by default the next one)."""
        topic = PARTITION_NOTIFICATIONS if isinstance(notification.payload, PartitionCommitted) else PROGRAM_NOTIFICATIONS
        offset = next(self._sources[topic]) if source_offset is None else source_offset
        await self.deliver(self.match_records(notification, topic, offset))

    def match_records(self, notification: Notification, topic: str, source_offset: int) -> list[Record]:
        key = notification.event_key()
        by_partition: dict[int, list[matching_pb2.MatchTarget]] = {}
        for schedule_id in sorted(self.schedules):
            schedule = self.schedules[schedule_id]
            if schedule.enabled and key in event_keys(schedule.trigger):
                by_partition.setdefault(kafka_partition(schedule_id.encode(), MATCHES_PARTITIONS), []).append(
                    matching_pb2.MatchTarget(schedule_id=schedule_id, schedule=schedule_to_proto(schedule)))
        source = matching_pb2.NotificationSource(topic=topic, partition=0, offset=source_offset)
        return [self._record(MATCHES, partition, targets[0].schedule_id, matching_pb2.MatchRequested(
                    targets=targets, notification=notification_to_proto(notification),
                    source=source).SerializeToString())
                for partition, targets in by_partition.items()]

    async def deliver(self, records: list[Record]) -> None:
        """One poll's records, each topic's run to its batch handler, as ConsumerLoop.step does."""
        for topic in dict.fromkeys(r.topic for r in records):
            handler = self._handlers[topic]
            await handler.apply([(r, handler.parse(r)) for r in records if r.topic == topic])

    def _record(self, topic: str, partition: int, key: str, value: bytes) -> Record:
        return Record(topic, partition, next(self._offsets[(topic, partition)]), key.encode(), value, (), 0)
