"""The trigger-matcher's first stage: which schedules does a notification concern?

Notifications arrive keyed by event key (`partition:<ns>.<dataset>`, ...), so one schedule's
inputs can land on different members of the group. This stage looks the event key up in a
reverse index of every enabled schedule and re-publishes the notification once per interested
schedule on the matches topic, keyed by schedule id: the second stage (MatcherService) then has
a single member per schedule.

The index is a projection of the registry's streams in the event log, brought up to date before
each notification is looked up: a schedule whose creation committed before the notification is
handled is always found (the schedules topic alone would race with the notification topics).
`follow` (a background task) folds the registry's events as they commit as well, so that check
usually finds nothing left to read. Only the registry's streams are read, filtered by the log.

Delivery is at least once: a crash between publishing and committing the notification's offset
publishes it again, and the second stage ignores a notification the schedule already counted. Each
MatchRequested carries the notification's source position and, for one an outbox relay published,
the relay's name and the event's log position, by which the second stage recognises a relay's
resends exactly (`NotificationSource`)."""
from __future__ import annotations

from collections import defaultdict

from sluice.bus.port import Message, Producer, Record, kafka_partition
from sluice.bus.topics import MATCHES, MATCHES_PARTITIONS
from sluice.domain import schedules, triggers
from sluice.domain.bounds import MAX_BUS_MESSAGE_BYTES
from sluice.eventlog.batched import paged
from sluice.eventlog.codec import EventTypes
from sluice.domain.schedules import Schedule, ScheduleState
from sluice.eventlog.port import EventLog, RecordedEvent
from sluice.runtime.consumer import REPLAYED_FOR_HEADER, BatchHandler
from sluice.runtime.outbox import POSITION_HEADER, RELAY_HEADER
from sluice.v1 import matching_pb2
from sluice.wire.schedules import schedule_to_proto
from sluice_services.catalogue import NOTIFYING_RELAYS, REGISTRY
from sluice_services.matcher.notification_key import notification_event_key

GROUP = "trigger-matcher-lookup"
"""The consumer group of the notification topics (this stage, or the one member's `fused` handler)."""
REGISTRY_PREFIX, = REGISTRY.stream_prefixes
REGISTRY_STREAMS = (REGISTRY_PREFIX,)
SYNC_BATCH = 5000
REGISTRY_TYPES = EventTypes(schedules.EVENTS)


class ScheduleLookup:
    def __init__(self, log: EventLog, producer: Producer) -> None:
        self._log = log
        self._producer = producer
        self._position = 0
        self._states: dict[str, ScheduleState] = {}
        self._index: dict[str, set[str]] = defaultdict(set)
        self._targets: dict[str, bytes] = {}

    def recover(self) -> None:
        self._position = 0
        self._states.clear()
        self._index.clear()
        self._targets.clear()
        self.sync()

    def sync(self) -> None:
        """Fold the registry's events committed since the last sync into the index: every one up to
        the head read with them (the log never shows a later event without the earlier ones)."""
        while True:
            events, head = self._log.read_all_to_head(self._position, SYNC_BATCH, REGISTRY_STREAMS)
            self._fold(events)
            if len(events) < SYNC_BATCH:
                self._position = max(self._position, head)
                return

    async def follow(self) -> None:
        """Fold the registry's events as they commit (a background task next to the consumers)."""
        async for events in self._log.subscribe_batches(self._position, REGISTRY_STREAMS):
            self._fold(events)

    def _fold(self, events: list[RecordedEvent]) -> None:
        for recorded in events:
            if recorded.position <= self._position:  # folded already, by sync() or follow()
                continue
            if recorded.stream.startswith(REGISTRY_PREFIX) and recorded.type in REGISTRY_TYPES:
                self._apply(recorded.stream.removeprefix(REGISTRY_PREFIX), REGISTRY_TYPES.decode(recorded))
            self._position = recorded.position

    def handler(self) -> BatchHandler:
        """A poll's notifications: the index is brought up to date once, and every MatchRequested
        they lead to goes out in one send."""
        return BatchHandler(self.parse, self.apply)

    @staticmethod
    def parse(record: Record) -> str:
        """The notification's event key; a malformed notification is refused here (`notification_key`)."""
        return notification_event_key(record.value)

    async def apply(self, items: list[tuple[Record, str]]) -> None:
        """One MatchRequested per notification and matches partition, for all that partition's
        interested schedules: the second stage records the notification's source position with it."""
        self.sync()
        messages = []
        for record, event_key in items:
            relay, relay_position = outbox_position(record)
            source = matching_pb2.MatchRequested(source=matching_pb2.NotificationSource(
                topic=record.topic, partition=record.partition, offset=record.offset, relay=relay,
                relay_position=relay_position)).SerializeToString()
            encoded = source + _NOTIFICATION_TAG + _varint(len(record.value)) + record.value  # as it came, valid
            by_partition: dict[int, list[str]] = {}
            for schedule_id in self.interested(event_key):
                by_partition.setdefault(kafka_partition(schedule_id.encode(), MATCHES_PARTITIONS), []).append(schedule_id)
            for schedule_ids in by_partition.values():
                targets = self._targets_fitting(schedule_ids, MAX_BUS_MESSAGE_BYTES - len(encoded))
                messages.append(Message(MATCHES, targets + encoded, schedule_ids[0].encode()))
        await self._producer.send_batch(messages)

    def _targets_fitting(self, schedule_ids: list[str], room: int) -> bytes:
        """The schedules' MatchRequested.targets in at most `room` bytes when they can be: each with its
        definition, or, when they do not all fit (many schedules, or large ones, on one dataset: the consumer
        would dead-letter the record and every one of them miss the notification), those that do not fit by
        their generation alone; the second stage reads those from the registry's stream (`registered`)."""
        full = [self._target(schedule_id) for schedule_id in schedule_ids]
        if sum(map(len, full)) <= room:
            return b"".join(full)
        references = [_reference(schedule_id, self._states[schedule_id].schedule.generation)
                      for schedule_id in schedule_ids]
        room -= sum(map(len, references))
        chosen = []
        for target, reference in zip(full, references):
            extra = len(target) - len(reference)
            if extra <= room:
                chosen.append(target)
                room -= extra
            else:
                chosen.append(reference)
        return b"".join(chosen)

    def interested(self, event_key: str) -> list[str]:
        """The enabled schedules an event key concerns, by id (as of the last `sync`)."""
        return sorted(self._index.get(event_key, ()))

    def observed(self, schedule_id: str) -> Schedule:
        """The definition the matcher decides with (`schedules.as_observed`) of a schedule the index holds."""
        return schedules.as_observed(self._states[schedule_id].schedule)

    def _target(self, schedule_id: str) -> bytes:
        """The schedule's entry in MatchRequested.targets, encoded once per definition: concatenated
        protobuf messages merge (repeated fields append), so targets + notification part is the whole message."""
        target = self._targets.get(schedule_id)
        if target is None:
            target = self._targets[schedule_id] = matching_pb2.MatchRequested(targets=[matching_pb2.MatchTarget(
                schedule_id=schedule_id, schedule=schedule_to_proto(self.observed(schedule_id)))]).SerializeToString()
        return target

    def _apply(self, schedule_id: str, event: schedules.ScheduleEvent) -> None:
        before = self._states.get(schedule_id, ScheduleState()).schedule
        after = schedules.evolve(self._states.get(schedule_id, ScheduleState()), event)
        self._states[schedule_id] = after
        self._targets.pop(schedule_id, None)
        if before is not None:
            for key in triggers.event_keys(before.trigger):
                self._index[key].discard(schedule_id)
        if after.schedule is not None and schedules.as_observed(after.schedule).enabled:
            for key in triggers.event_keys(after.schedule.trigger):
                self._index[key].add(schedule_id)


def _reference(schedule_id: str, generation: int) -> bytes:
    return matching_pb2.MatchRequested(targets=[matching_pb2.MatchTarget(
        schedule_id=schedule_id, generation=generation)]).SerializeToString()


def registered(log: EventLog, schedule_id: str) -> Schedule | None:
    """The schedule as its registry stream has it now, as the matcher acts on it (`schedules.as_observed`);
    None when it was deleted, or never created."""
    state = ScheduleState()
    for recorded in paged(log, REGISTRY_PREFIX + schedule_id, 0, SYNC_BATCH):
        if recorded.type in REGISTRY_TYPES:
            state = schedules.evolve(state, REGISTRY_TYPES.decode(recorded))
    return None if state.schedule is None else schedules.as_observed(state.schedule)


def outbox_position(record: Record) -> tuple[str, int]:
    """The relay that published the record and its event's log position (`sluice.runtime.outbox`'s
    headers), or ("", 0): a producer's own notification, or headers that do not parse or name a relay
    that publishes no notifications. The name becomes part of checkpoint names: only those few are
    recorded, whatever a writer to the topic puts in its headers. (Positions are trusted: only Sluice's
    services may write the notification topics, deploy/README.md's ACLs.) A dead letter this group left and
    an operator replayed counts as a producer's own notification too: later positions of its relay may be
    recorded since, and it would pass for their resend; the schedules' recent ids still catch a replay's
    replay."""
    headers = dict(record.headers)
    relay, position = headers.get(RELAY_HEADER), headers.get(POSITION_HEADER)
    if relay not in _RELAYS or not position or not position.isdigit() or len(position) > 18 \
            or record.header(REPLAYED_FOR_HEADER) == GROUP:
        return "", 0
    return _RELAYS[relay], int(position)


_RELAYS = {name.encode(): name for name in NOTIFYING_RELAYS}


_NOTIFICATION_TAG = bytes([matching_pb2.MatchRequested.NOTIFICATION_FIELD_NUMBER << 3 | 2])
"""MatchRequested.notification's key (length-delimited): the notification's bytes are embedded as
they arrived, not decoded and encoded again."""


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
