"""A dead letter replayed by an operator (`sluice dlq replay`) is handled by the group that left it, though that
group moved past it since: the matcher had recorded later positions of the same outbox relay (or source
partition) and took the replay for their resend; the checker had queued later jobs of the schedule and took it
for a redelivery by its sequence. A replay for another group is a redelivery to the matcher, which had decided
it already."""
from __future__ import annotations

import contextlib
import uuid

import pytest

from sluice.bus.port import Record
from sluice.bus.topics import ALL_TOPICS, DEAD_LETTER, JOBS, MATCHES, PARTITION_NOTIFICATIONS
from sluice.domain.matching import JobTriggered
from sluice.runtime.consumer import REPLAYED_FOR_HEADER, send_to_dead_letter
from sluice_services.checker.service import GROUP as CHECKER_GROUP, CheckerService
from sluice_services.matcher import lookup, service
from sluice_services.sre.dead_letters import republish
from tests.integration.test_matcher_one_member import BURST, OneMember, relayed, schedule, through_the_stages

pytestmark = pytest.mark.integration


@contextlib.asynccontextmanager
async def one_member(tmp_path, *schedules):
    member = OneMember(tmp_path, *schedules)
    try:
        await member.bus.create_topics(ALL_TOPICS)
        yield member
    finally:
        await member.close()


async def replayed(member: OneMember, record: Record, group: str, topic: str) -> Record:
    """The record dead-lettered by `group`, then published again by the operator's replay."""
    letters = member.bus.consumer(f"sluice-dlq-{uuid.uuid4().hex}", [DEAD_LETTER])
    await letters.poll(timeout=0)  # their end: only this one comes after
    await send_to_dead_letter(member.producer, record, group, "the handler failed 5 times")
    replays = member.bus.consumer(f"replays-{uuid.uuid4().hex}", [topic])
    await replays.poll(timeout=0)
    await republish(member.producer, await letters.poll(timeout=0))
    replay, = await replays.poll(timeout=0)
    assert dict(replay.headers)[REPLAYED_FOR_HEADER] == group.encode()
    return replay


async def published(member: OneMember, *hours: int) -> list[Record]:
    """The outbox relay's notifications of these hours (relay positions 100 + hour), as the bus delivers
    them: on the partition of their key, where a replay of one lands again."""
    notifications = member.bus.consumer(f"notifications-{uuid.uuid4().hex}", [PARTITION_NOTIFICATIONS])
    await notifications.poll(timeout=0)
    for hour in hours:
        each = relayed(0, hour)
        await member.producer.send(PARTITION_NOTIFICATIONS, each.value, key=each.key, headers=list(each.headers))
    return await notifications.poll(timeout=0)


def fired_for(member: OneMember, schedule_id: str) -> list[str]:
    return [n.id for e in member.events(schedule_id) if isinstance(e, JobTriggered) for n in e.job.context.notifications]


@pytest.mark.parametrize("composition", ["one member", "two stages"])
async def test_a_relayed_notification_the_lookup_dead_lettered_is_decided_when_replayed(tmp_path, composition):
    each = schedule("every-hour", 1)
    async with one_member(tmp_path, each) as member:
        matches = member.bus.consumer("second-stage", [MATCHES])

        async def handle(record: Record) -> None:
            if composition == "one member":
                await member.handle(record)
            else:
                await through_the_stages(member, [record], matches)

        poisoned, later = await published(member, 1, 2)  # relay positions 101 and 102
        await handle(later)  # the first was dead-lettered; the relay's later notifications went on
        await handle(await replayed(member, poisoned, lookup.GROUP, PARTITION_NOTIFICATIONS))

        assert fired_for(member, each.id) == ["n-02", "n-01"]


async def test_a_replay_for_another_group_is_a_redelivery_to_the_matcher(tmp_path):
    each = schedule("every-hour", 1)
    async with one_member(tmp_path, each) as member:
        first, *later = await published(member, *range(1, 2 + BURST))  # n-01 leaves the schedule's recent ids
        await member.handle(first, *later)
        await member.handle(await replayed(member, first, "alerts", PARTITION_NOTIFICATIONS))

        assert fired_for(member, each.id) == [f"n-{hour:02d}" for hour in range(1, 2 + BURST)]


async def test_a_match_request_the_second_stage_dead_lettered_is_decided_when_replayed(tmp_path):
    each = schedule("every-hour", 1)
    async with one_member(tmp_path, each) as member:
        matches = member.bus.consumer("second-stage", [MATCHES])
        await member.lookup.apply([(r, member.lookup.parse(r)) for r in await published(member, 1, 2)])
        poisoned, later = await matches.poll(timeout=0)
        handler = member.matcher.handlers()[MATCHES]
        await handler.apply([(later, handler.parse(later))])  # the first was dead-lettered

        replay = await replayed(member, poisoned, service.GROUP, MATCHES)
        await handler.apply([(replay, handler.parse(replay))])

        assert fired_for(member, each.id) == ["n-02", "n-01"]


async def test_a_replay_names_the_group_of_its_last_dead_lettering_only(tmp_path):
    async with one_member(tmp_path) as member:
        first, = await published(member, 1)
        again = await replayed(member, await replayed(member, first, "alerts", PARTITION_NOTIFICATIONS),
                               lookup.GROUP, PARTITION_NOTIFICATIONS)
        assert again.value == first.value and again.key == first.key
        assert list(again.headers) == [*first.headers, (REPLAYED_FOR_HEADER, lookup.GROUP.encode())]


async def test_a_job_the_checker_dead_lettered_is_admitted_when_replayed_after_later_jobs(tmp_path):
    each = schedule("every-hour", 1)
    async with one_member(tmp_path, each) as member:
        await member.handle(*await published(member, 1, 2))
        jobs = member.bus.consumer(f"checker-{uuid.uuid4().hex}", [JOBS])
        for event in member.log.read_all(0, 10_000):
            for message in member.matcher.route(event):
                await member.producer.send(message.topic, message.value, key=message.key.encode())
        poisoned, later = await jobs.poll(timeout=0)  # the jobs of n-01 and n-02
        checker = CheckerService(member.log, member.clock)
        checker.recover()
        await checker.apply([(later, checker.parse_job_triggered(later))])  # the first was dead-lettered

        replay = await replayed(member, poisoned, CHECKER_GROUP, JOBS)
        await checker.apply([(replay, checker.parse_job_triggered(replay))])

        launched = [message.key for event in member.log.read_all(0, 10_000) for message in checker.route(event)]
        assert len(launched) == 2 and len(set(launched)) == 2
