"""The matcher stage decides a poll of records together: one append with the consumed offsets,
the same events as record by record, and a redelivered poll (also after a restart) changes nothing."""
from __future__ import annotations

import random
from datetime import datetime, timezone

from sluice.bus.port import Record, kafka_partition
from sluice.bus.topics import MATCHES, MATCHES_PARTITIONS, PARTITION_NOTIFICATIONS, SCHEDULES
from sluice.clock import SimulatedClock
from sluice.domain.common import Notification, PartitionCommitted, PartitionRef, ProgramRef
from sluice.domain.schedules import Schedule, schedule_id_for
from sluice.domain.triggers import AndTrigger, PartitionTrigger
from sluice.domain.matching import ScheduleObserved, stream_name
from sluice.eventlog.batched import expand_all
from sluice.eventlog.codec import encode
from sluice.eventlog.port import NO_STREAM, StreamAppend
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.v1 import matching_pb2, schedules_pb2
from sluice.wire.common import notification_to_proto
from sluice.wire.schedules import schedule_to_proto
from sluice_services.matcher import decisions
from sluice_services.matcher.service import MatcherService

T0 = datetime(2026, 11, 22, tzinfo=timezone.utc)
PROGRAM = ProgramRef("ns", "app", "p")
DATASETS = 4


def schedules() -> list[Schedule]:
    found = []
    for index in range(DATASETS):
        for count in (1, 2):
            found.append(Schedule("", f"d{index}-x{count}", PROGRAM, PartitionTrigger("ns", f"d{index}", count),
                                  enabled=True))
        found.append(Schedule("", f"d{index}-and", PROGRAM, AndTrigger((
            PartitionTrigger("ns", f"d{index}"), PartitionTrigger("ns", f"d{(index + 1) % DATASETS}"))), enabled=True))
    return [Schedule(schedule_id_for(PROGRAM, s.name), s.name, s.program, s.trigger, enabled=True) for s in found]


def schedule_records(all_schedules: list[Schedule]) -> list[Record]:
    return [Record(SCHEDULES, 0, offset, s.id.encode(), schedules_pb2.ScheduleChanged(
        schedule_id=s.id, schedule=schedule_to_proto(s)).SerializeToString(), (), 0)
        for offset, s in enumerate(all_schedules)]


def match_records(all_schedules: list[Schedule], count: int) -> list[Record]:
    """What the first stage publishes for `count` notifications (a resent one among them): one
    record per notification and matches partition, for that partition's interested schedules."""
    rng = random.Random(7)
    notifications = [Notification(f"n-{i}", T0, PartitionCommitted(
        "ns", f"d{rng.randrange(DATASETS)}", (PartitionRef({"i": str(i)}, f"/d/{i}"),))) for i in range(count)]
    notifications.append(notifications[3])  # the producer resent one: same id, new offsets
    return republished(all_schedules, list(enumerate(notifications)), [0] * MATCHES_PARTITIONS)


def republished(all_schedules: list[Schedule], sourced: list[tuple[int, Notification]],
                offsets: list[int]) -> list[Record]:
    """The records of (source offset, notification) pairs, appended at `offsets` of the matches topic."""
    records = []
    for source_offset, notification in sourced:
        key = f"partition:ns.{notification.payload.dataset}"
        targets: dict[int, list[matching_pb2.MatchTarget]] = {}
        for s in sorted(all_schedules, key=lambda s: s.id):
            trigger_keys = {f"partition:ns.{leaf.dataset}" for leaf in getattr(s.trigger, "all_of", (s.trigger,))}
            if key in trigger_keys:
                targets.setdefault(kafka_partition(s.id.encode(), MATCHES_PARTITIONS), []).append(
                    matching_pb2.MatchTarget(schedule_id=s.id, schedule=schedule_to_proto(s)))
        for partition, group in targets.items():
            message = matching_pb2.MatchRequested(
                targets=group, notification=notification_to_proto(notification),
                source=matching_pb2.NotificationSource(topic=PARTITION_NOTIFICATIONS, partition=0, offset=source_offset))
            records.append(Record(MATCHES, partition, offsets[partition], group[0].schedule_id.encode(),
                                  message.SerializeToString(), (), 0))
            offsets[partition] += 1
    return records


class CountingLog(SqliteEventLog):
    appends = 0

    def append_batch(self, appends, *, checkpoints=()):
        self.appends += 1
        return super().append_batch(appends, checkpoints=checkpoints)


async def deliver(handler, records: list[Record]) -> None:
    """A poll of records, as the consumer loop hands it to a batch handler."""
    await handler.apply([(record, handler.parse(record)) for record in records])


def per_stream(log) -> dict[str, list[tuple[int, str, bytes]]]:
    streams: dict[str, list] = {}
    for recorded in expand_all(log.read_all(0, 100_000)):
        if recorded.stream.startswith("matcher-"):
            streams.setdefault(recorded.stream, []).append((recorded.version, recorded.type, bytes(recorded.data)))
    return streams


async def test_a_poll_is_one_append_with_the_events_of_record_by_record_handling(tmp_path):
    clock = SimulatedClock(T0)
    all_schedules = schedules()
    records = match_records(all_schedules, 30)

    one_by_one = SqliteEventLog(tmp_path / "one.db", clock=clock)
    single = MatcherService(one_by_one, clock)
    alone = single.handlers()  # one record per poll, as the consumer loop hands a lone record
    for record in schedule_records(all_schedules):
        await alone[SCHEDULES].apply([(record, alone[SCHEDULES].parse(record))])
    for record in records:
        await alone[MATCHES].apply([(record, alone[MATCHES].parse(record))])

    batched = CountingLog(tmp_path / "batched.db", clock=clock)
    matcher = MatcherService(batched, clock)
    handlers = matcher.handlers()
    await handlers[SCHEDULES].apply([(r, handlers[SCHEDULES].parse(r)) for r in schedule_records(all_schedules)])
    assert batched.appends == 1
    await handlers[MATCHES].apply([(r, handlers[MATCHES].parse(r)) for r in records])
    assert batched.appends == 2

    assert per_stream(batched) == per_stream(one_by_one)
    assert any(t == "JobTriggered" for events in per_stream(batched).values() for _, t, _ in events)
    for partition in {r.partition for r in records}:
        last = max(r.offset for r in records if r.partition == partition)
        assert batched.read_checkpoint(f"matcher:{MATCHES}:{partition}") == last + 1
    assert matcher.states() == single.states()

    head = batched.head_position()
    await handlers[MATCHES].apply([(r, handlers[MATCHES].parse(r)) for r in records])  # the poll redelivered
    restarted = MatcherService(batched, clock)
    restarted.recover()
    again = restarted.handlers()[MATCHES]
    await again.apply([(r, again.parse(r)) for r in records])  # and again after a restart
    assert batched.head_position() == head
    assert restarted.states() == matcher.states()
    one_by_one.close()
    batched.close()


async def test_what_the_first_stage_publishes_again_changes_nothing(tmp_path):
    """After a rebalance the first stage publishes a poll's notifications again: new records (new
    offsets on the matches topic) with source offsets the partition has passed. Nothing changes,
    also for a restarted member, while a notification not seen before still counts."""
    clock = SimulatedClock(T0)
    all_schedules = schedules()
    records = match_records(all_schedules, 30)
    log = SqliteEventLog(tmp_path / "events.db", clock=clock)
    matcher = MatcherService(log, clock)
    handlers = matcher.handlers()
    await deliver(handlers[SCHEDULES], schedule_records(all_schedules))
    await deliver(handlers[MATCHES], records)
    states, head = matcher.states(), log.head_position()

    offsets = [max((r.offset + 1 for r in records if r.partition == p), default=0) for p in range(MATCHES_PARTITIONS)]
    rng = random.Random(7)
    again = [(i, Notification(f"n-{i}", T0, PartitionCommitted(
        "ns", f"d{rng.randrange(DATASETS)}", (PartitionRef({"i": str(i)}, f"/d/{i}"),)))) for i in range(30)]
    second = republished(all_schedules, again[20:], offsets)
    await deliver(handlers[MATCHES], second)
    assert log.head_position() == head and matcher.states() == states

    restarted = MatcherService(log, clock)
    restarted.recover()
    third = republished(all_schedules, again[10:], offsets)
    handler = restarted.handlers()[MATCHES]
    await deliver(handler, third)
    assert log.head_position() == head and restarted.states() == states

    fresh = Notification("n-new", T0, PartitionCommitted("ns", "d0", (PartitionRef({"i": "new"}, "/d/new"),)))
    await deliver(handler, republished(all_schedules, [(31, fresh)], offsets))
    counted_by = {r.stream for r in expand_all(log.read_all(head, 1000)) if b'"n-new"' in r.data}  # matched, or fired by it alone
    assert len(counted_by) == sum(1 for s in all_schedules if "d0" in {leaf.dataset for leaf in
                                                                    getattr(s.trigger, "all_of", (s.trigger,))})
    log.close()


async def test_a_poll_another_member_recorded_meanwhile_is_skipped_not_decided_again(tmp_path):
    """A rebalance moved partitions while their old owner still held the positions it had read: the
    new owner recorded a poll, and the old one then handles the same poll. Its append expects the
    positions it knew, fails, and after reading them again it records nothing. (More notifications
    per schedule than its window of recent ones, so counting them twice would show.)"""
    clock = SimulatedClock(T0)
    all_schedules = schedules()
    records = match_records(all_schedules, 200)
    log = CountingLog(tmp_path / "events.db", clock=clock)
    handlers = MatcherService(log, clock).handlers()  # the old owner's
    await deliver(handlers[SCHEDULES], schedule_records(all_schedules))
    first, second = records[:len(records) // 4], records[len(records) // 4:]
    await deliver(handlers[MATCHES], first)

    new_owner = MatcherService(log, clock)
    new_owner.recover()
    await deliver(new_owner.handlers()[MATCHES], second)
    head, appends = log.head_position(), log.appends

    await deliver(handlers[MATCHES], second)
    assert log.head_position() == head and log.appends == appends + 1  # the one append that failed
    reread = MatcherService(log, clock)
    reread.recover()
    assert reread.states() == new_owner.states()


async def test_a_poll_is_one_batch_record_per_matches_partition_and_a_wide_one_several(tmp_path, monkeypatch):
    """Every decision of a poll on a partition's schedules is one record of that partition's stream;
    records are cut at BATCH_BYTES, and recovery folds what either wrote to the same states."""
    clock = SimulatedClock(T0)
    all_schedules = schedules()
    records = match_records(all_schedules, 30)
    written = {}
    for name, cap in (("one", decisions.BATCH_BYTES), ("cut", 2_000)):
        monkeypatch.setattr(decisions, "BATCH_BYTES", cap)
        log = SqliteEventLog(tmp_path / f"{name}.db", clock=clock)
        matcher = MatcherService(log, clock)
        handlers = matcher.handlers()
        await handlers[SCHEDULES].apply([(r, handlers[SCHEDULES].parse(r)) for r in schedule_records(all_schedules)])
        head = log.head_position()
        await handlers[MATCHES].apply([(r, handlers[MATCHES].parse(r)) for r in records])
        polled = log.read_all(head, 1000)
        assert {r.type for r in polled} == {"Batch"}
        assert {r.stream for r in polled} == {decisions.partition_stream(s.id) for s in all_schedules
                                              if s.id in {e.stream.removeprefix("matcher-") for e in expand_all(polled)}}
        written[name] = (polled, per_stream(log), matcher.states())
        restarted = MatcherService(log, clock)
        restarted.recover()
        assert restarted.states() == matcher.states()
        log.close()
    one, cut = written["one"], written["cut"]
    assert len(one[0]) <= MATCHES_PARTITIONS < len(cut[0])  # the cap cut the same decisions into more records
    assert all(sum(len(e.data) for e in expand_all([r])) <= 2_000 or len(expand_all([r])) == 1 for r in cut[0])
    assert cut[1] == one[1] and cut[2] == one[2]


async def test_an_older_log_s_schedule_streams_go_on_in_their_partition_s_batches(tmp_path):
    """A log written before batches holds each schedule's events in a stream of its own: the
    schedule's next events follow them in version, and recovery folds both in order."""
    clock = SimulatedClock(T0)
    all_schedules = schedules()
    log = SqliteEventLog(tmp_path / "events.db", clock=clock)
    log.append_batch([StreamAppend(stream_name(s.id), [encode(ScheduleObserved(s, T0), f"old-{s.id}")], NO_STREAM)
                      for s in all_schedules])  # what the matcher wrote per schedule before
    matcher = MatcherService(log, clock)
    matcher.recover()
    assert {s.id for s in all_schedules} == {schedule_id for schedule_id, state in matcher.states().items()
                                             if state.schedule is not None}
    handler = matcher.handlers()[MATCHES]
    await handler.apply([(r, handler.parse(r)) for r in match_records(all_schedules, 30)])

    streams = per_stream(log)
    assert all([version for version, _, _ in events] == list(range(len(events))) for events in streams.values())
    assert all(streams[stream_name(s.id)][0][1] == "ScheduleObserved" for s in all_schedules)
    restarted = MatcherService(log, clock)
    restarted.recover()
    assert restarted.states() == matcher.states()
    log.close()
