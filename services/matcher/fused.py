"""The matcher of a process that holds its only member (the in-process bus): the lookup and the
decisions in one handler, with no matches topic between them.

With one member, the member that looks a notification up also owns every schedule it concerns. So a
poll of notifications is looked up in the lookup's index and decided for the schedules at once: one
append per poll, with each notification's own position as consumed (and its outbox relay's position,
`MatcherService._more`), where the two stages published a MatchRequested per matches partition,
committed it to the bus's file and parsed it back: one round of the event loop less on a notification's
way (docs/decisions.md).

The matches topic is still consumed (`MatcherService.handlers`): a log the two stages wrote may leave
MatchRequested records not yet handled. A notification both paths see (the first stage published it and
stopped before committing its offset) is decided once: each path skips what the other recorded (its
source positions: `MatcherService.handled_by_the_stages`, `MatcherService._more`)."""
from __future__ import annotations

from sluice.bus.port import Record
from sluice.domain.common import Notification
from sluice.runtime.consumer import BatchHandler
from sluice.wire.common import notification_from_bytes
from sluice_services.matcher.lookup import ScheduleLookup, outbox_position
from sluice_services.matcher.service import MatchRequest, MatchRequests, MatcherService, SourcePosition


class LookupAndMatch:
    def __init__(self, lookup: ScheduleLookup, matcher: MatcherService) -> None:
        self._lookup = lookup
        self._matcher = matcher

    def handler(self) -> BatchHandler:
        return BatchHandler(self.parse, self.apply)

    @staticmethod
    def parse(record: Record) -> Notification:
        """The notification; a malformed one is refused here, as the lookup refuses it."""
        return notification_from_bytes(record.value)

    async def apply(self, items: list[tuple[Record, Notification]]) -> None:
        """The index brought up to date once, then each notification decided for every interested
        schedule, with the lookup's definition (the schedules topic may not have brought it yet)."""
        lookup, matcher = self._lookup, self._matcher
        lookup.sync()
        commands = []
        for record, notification in items:
            relay, relay_position = outbox_position(record)
            source = SourcePosition(record.topic, record.partition, record.offset, relay, relay_position)
            requests = tuple(MatchRequest(schedule_id, notification, lookup.observed(schedule_id))
                             for schedule_id in lookup.interested(notification.event_key())
                             if not matcher.handled_by_the_stages(schedule_id, source))
            if requests:
                commands.append((record, MatchRequests(requests, source)))
        if commands:
            await matcher.apply(commands)
