"""Issue 23, hole 5: poison inputs are refused where they enter or dead-lettered with their reason;
no number accepted overflows date arithmetic later, no size accepted is too big for the bus."""
from __future__ import annotations

from datetime import datetime, timezone

from sluice.bus.port import Record
from sluice.runtime.consumer import BatchHandler, ConsumerLoop, Subscription
from sluice.v1 import notifications_pb2 as pb
from services.matcher.lookup import ScheduleLookup

T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)


class OnePollConsumer:
    def __init__(self, records: list[Record]) -> None:
        self._records = records
        self.commits: list = []

    async def poll(self, timeout: float = 1.0, max_records: int = 500) -> list[Record]:
        records, self._records = self._records, []
        return records

    async def commit(self, offsets=None) -> None:
        self.commits.append(offsets)

    def assignment(self) -> set:
        return set()

    async def close(self) -> None:
        pass


class DeadLetters:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes, dict]] = []

    async def send(self, topic, value, key=None, headers=()) -> None:
        self.sent.append((value, dict(headers)))

    async def close(self) -> None:
        pass


def _notification(notification_id: str, seconds: int) -> bytes:
    message = pb.Notification(id=notification_id, partition_committed=pb.PartitionCommitted(
        namespace="ns", dataset="clicks", partitions=[pb.PartitionRef(
            key=[pb.KeyValue(name="hour", value="1")], location="/data/1")]))
    message.time.seconds = seconds
    return message.SerializeToString()


async def test_a_far_future_timestamp_in_a_poll_of_many_is_dead_lettered_and_the_rest_handled():
    """Timestamp.seconds = 10**12 in a poll of two records: the matcher lookup's batch handler
    dead-letters that record with its reason, applies the other, and the poll is committed."""
    good = _notification("good", int(T0.timestamp()))
    bad = _notification("bad", 10**12)
    records = [Record("partition-notifications", 0, offset, b"k", value, (), 0)
               for offset, value in enumerate([bad, good])]
    applied = []

    async def apply(items):
        applied.extend(record.value for record, _ in items)

    consumer, dead = OnePollConsumer(records), DeadLetters()
    loop = ConsumerLoop(consumer, Subscription("matcher-lookup", {
        "partition-notifications": BatchHandler(ScheduleLookup.parse, apply)}), dead)
    assert await loop.step(0) == 2
    assert applied == [good]
    assert [value for value, _ in dead.sent] == [bad]
    reason = dead.sent[0][1]["reason"].decode()
    assert reason.startswith("malformed:") and "notification.time" in reason
    assert consumer.commits  # the poll's offsets are committed


async def test_any_parse_error_of_one_record_in_a_batch_dead_letters_that_record():
    """Defence in depth: a parser's unexpected error (a bug) dead-letters its record, not the process."""
    def parse(record: Record) -> bytes:
        if record.value == b"boom":
            raise OverflowError("date value out of range")
        return record.value

    applied = []

    async def apply(items):
        applied.extend(value for _, value in items)

    records = [Record("t", 0, offset, b"k", value, (), 0) for offset, value in enumerate([b"boom", b"ok", b"ok2"])]
    consumer, dead = OnePollConsumer(records), DeadLetters()
    loop = ConsumerLoop(consumer, Subscription("g", {"t": BatchHandler(parse, apply)}), dead)
    assert await loop.step(0) == 3
    assert applied == [b"ok", b"ok2"]
    assert [value for value, _ in dead.sent] == [b"boom"]
    assert "date value out of range" in dead.sent[0][1]["reason"].decode()


# --- (b) every number of a schedule has a range that keeps date arithmetic finite -------------
import pytest  # noqa: E402
from google.protobuf import duration_pb2  # noqa: E402

from sluice.domain.errors import InvalidArgument  # noqa: E402
from sluice.v1 import schedules_pb2 as spb  # noqa: E402
from sluice.wire.schedules import schedule_from_proto  # noqa: E402

HUGE = 10**15


def _schedule_message(**changes) -> spb.Schedule:
    message = spb.Schedule(name="s", program=pb.ProgramRef(namespace="ns", app="a", program="p"),
                           trigger=spb.Trigger(time=spb.TimeTrigger(cron="* * * * * *", zone="UTC")))
    for name, value in changes.items():
        if name == "trigger":
            message.trigger.CopyFrom(value)
        elif name == "constraint":
            message.constraints.append(value)
        elif name in ("timeout", "catch_up"):
            getattr(message, name).CopyFrom(duration_pb2.Duration(seconds=value))
        elif name == "retry_policy":
            message.retry_policy.CopyFrom(value)
        elif name == "properties":
            message.properties.update(value)
        else:
            setattr(message, name, value)
    return message


@pytest.mark.parametrize("changes, field", [
    (dict(catch_up=1_000_000_000_000), "schedule.catch_up"),
    (dict(timeout=HUGE), "schedule.timeout"),
    (dict(priority=2**31 - 1), "schedule.priority"),
    (dict(constraint=spb.Constraint(delay=spb.DelayConstraint(seconds=HUGE))), "schedule.constraints[0].delay.seconds"),
    (dict(constraint=spb.Constraint(min_since_last_run=spb.MinSinceLastRunConstraint(min_seconds=HUGE))),
     "schedule.constraints[0].min_since_last_run.min_seconds"),
    (dict(constraint=spb.Constraint(max_runs_per_window=spb.MaxRunsPerWindowConstraint(max_runs=2**31 - 1))),
     "schedule.constraints[0].max_runs_per_window.max_runs"),
    (dict(constraint=spb.Constraint(concurrency=spb.ConcurrencyConstraint(max_running=2**31 - 1))),
     "schedule.constraints[0].concurrency.max_running"),
    (dict(trigger=spb.Trigger(elapsed=spb.ElapsedTrigger(seconds=HUGE))), "schedule.trigger.elapsed.seconds"),
    (dict(trigger=spb.Trigger(quiet_period=spb.QuietPeriodTrigger(namespace="ns", dataset="d", quiet_seconds=HUGE))),
     "schedule.trigger.quiet_period.quiet_seconds"),
    (dict(trigger=spb.Trigger(partition=spb.PartitionTrigger(namespace="ns", dataset="d", count=2**31 - 1))),
     "schedule.trigger.partition.count"),
    (dict(trigger=spb.Trigger(data_size=spb.DataSizeTrigger(namespace="ns", dataset="d", min_bytes=2**63 - 1))),
     "schedule.trigger.data_size.min_bytes"),
    (dict(retry_policy=spb.RetryPolicy(max_retries=2**31 - 1)), "schedule.retry_policy.max_retries"),
    (dict(retry_policy=spb.RetryPolicy(max_retries=1, delay=duration_pb2.Duration(seconds=HUGE))),
     "schedule.retry_policy.delay"),
])
def test_a_number_beyond_its_range_is_invalid_argument_naming_the_field_and_the_range(changes, field):
    with pytest.raises(InvalidArgument) as error:
        schedule_from_proto(_schedule_message(**changes), "sid")
    assert error.value.field == field
    assert "range" in error.value.message


def test_the_longest_accepted_durations_keep_date_arithmetic_finite():
    """The latest accepted time plus every longest duration, and the largest backed-off retry delay."""
    from datetime import timedelta

    from sluice.domain import bounds
    from sluice.domain.jobs import RetryPolicy
    longest = bounds.LATEST_TIME + timedelta(seconds=bounds.MAX_DURATION_SECONDS) * 4
    assert longest.year < 9999
    policy = RetryPolicy(max_retries=bounds.MAX_RETRIES, delay_seconds=bounds.MAX_DURATION_SECONDS, backoff=100.0)
    assert policy.delay_before(bounds.MAX_RETRIES) == bounds.MAX_DURATION_SECONDS
    assert RetryPolicy(max_retries=10_000, backoff=100.0).delay_before(10_000) == bounds.MAX_DURATION_SECONDS


# --- (c) an OpenLineage event holding a lone surrogate: 400, INVALID_ARGUMENT, a dead letter -------
import json  # noqa: E402

import grpc  # noqa: E402

from sluice.clock import SimulatedClock  # noqa: E402
from sluice.eventlog.sqlite import SqliteEventLog  # noqa: E402
from sluice_services.lineage import http_api  # noqa: E402
from sluice_services.lineage.grpc_api import LineageServicer  # noqa: E402
from sluice_services.lineage.service import LineageService  # noqa: E402
from sluice.v1 import lineage_pb2  # noqa: E402

SURROGATE_EVENT = ('{"eventType": "START", "eventTime": "2026-03-01T00:00:00Z", "producer": "https://x", '
                   '"schemaURL": "https://x", "run": {"runId": "0190e0a6-6c8e-7b3e-8c3e-3f1f6c1d2e4a"}, '
                   '"job": {"namespace": "ns", "name": "job-\\ud800"}}').encode()


class AbortingContext:
    async def abort(self, code, details):
        raise grpc.aio.AbortError(code, details)


async def test_a_lone_surrogate_in_a_lineage_event_is_refused_on_every_path(tmp_path):
    assert json.loads(SURROGATE_EVENT)["job"]["name"] == "job-\ud800"
    log = SqliteEventLog(tmp_path / "events.db", clock=SimulatedClock(T0))
    service = LineageService(log, SimulatedClock(T0))
    try:
        # HTTP: a 400 with the reason
        import aiohttp
        runner = await http_api.serve(service, "127.0.0.1", 0)
        try:
            async with aiohttp.ClientSession() as session:
                async with session.post(f"http://127.0.0.1:{http_api.bound_port(runner)}/api/v1/lineage",
                                        data=SURROGATE_EVENT, headers={"Content-Type": "application/json"}) as answer:
                    assert answer.status == 400
                    assert "surrogate" in (await answer.json())["error"]
        finally:
            await runner.cleanup()
        # gRPC RecordEvent: INVALID_ARGUMENT
        with pytest.raises(grpc.aio.AbortError) as aborted:
            await LineageServicer(service).RecordEvent(
                lineage_pb2.RecordLineageEventRequest(event=SURROGATE_EVENT), AbortingContext())
        assert aborted.value.args[0] == grpc.StatusCode.INVALID_ARGUMENT and "surrogate" in aborted.value.args[1]
        # the lineage topic: a dead letter with its reason, at once
        consumer, dead = OnePollConsumer([Record("lineage", 0, 0, b"k", SURROGATE_EVENT, (), 0)]), DeadLetters()

        async def on_lineage_event(record):
            service.handle_message(record.value)
        loop = ConsumerLoop(consumer, Subscription("lineage", {"lineage": on_lineage_event}), dead)
        assert await loop.step(0) == 1
        assert len(dead.sent) == 1
        reason = dead.sent[0][1]["reason"].decode()
        assert reason.startswith("malformed:") and "surrogate" in reason
        assert log.read_all(0, 10) == []  # nothing stored
    finally:
        log.close()


# --- (f) the latest missed fire is computed, not enumerated ---------------------------------------
import time as _time  # noqa: E402
from datetime import timedelta  # noqa: E402

from sluice.domain import matching  # noqa: E402
from sluice.domain.common import ProgramRef  # noqa: E402
from sluice.domain.schedules import MisfirePolicy, Schedule  # noqa: E402
from sluice.domain.triggers import TimeTrigger, latest_fire  # noqa: E402


def _per_second(policy: MisfirePolicy, catch_up: int = 24 * 3600) -> Schedule:
    return Schedule("sid", "s", ProgramRef("ns", "a", "p"), TimeTrigger("* * * * * *", "Europe/Berlin"),
                    enabled=True, misfire_policy=policy, catch_up_seconds=catch_up)


def _after_downtime(schedule: Schedule, downtime: timedelta) -> tuple[list, datetime]:
    """The schedule observed at T0 (its first job waits from then), then a clock jump of `downtime`."""
    events, state = matching.step(matching.MatcherState(), matching.ObserveSchedule("sid", schedule), T0)
    now = T0 + downtime
    started = _time.perf_counter()
    events, state = matching.step(state, matching.CheckTime(), now)
    assert _time.perf_counter() - started < 1.0  # a year of per-second fires is 31.5 million: not enumerated
    return events, now


def test_a_year_of_downtime_at_a_per_second_cron_fires_once_with_the_latest_missed_time_at_once():
    events, now = _after_downtime(_per_second(MisfirePolicy.FIRE_ONCE), timedelta(days=365, milliseconds=500))
    fired = [e for e in events if isinstance(e, matching.JobTriggered)]
    assert len(fired) == 1 and fired[0].job.context.logical_time == now.replace(microsecond=0)


def test_fire_each_after_a_year_of_downtime_runs_at_most_the_capped_number_of_the_newest_missed_times():
    from sluice.domain.bounds import MAX_CATCH_UP_FIRES
    events, now = _after_downtime(_per_second(MisfirePolicy.FIRE_EACH), timedelta(days=365))
    skipped = [e for e in events if isinstance(e, matching.MissedFiresSkipped)]
    fired = [e for e in events if isinstance(e, matching.JobTriggered)]
    assert len(skipped) == 1 and skipped[0].until == now - timedelta(seconds=MAX_CATCH_UP_FIRES)
    assert fired[0].job.context.logical_time == now - timedelta(seconds=MAX_CATCH_UP_FIRES - 1)


def test_latest_fire_agrees_with_enumeration_across_dst_changes():
    trigger = TimeTrigger("*/20 * * * *", "America/New_York")
    for start in (datetime(2026, 3, 8, 5, tzinfo=timezone.utc), datetime(2026, 11, 1, 4, tzinfo=timezone.utc)):
        for minutes in range(0, 240, 7):
            until = start + timedelta(minutes=minutes, seconds=13)
            from sluice.domain.triggers import next_fire_times
            expected = (next_fire_times(trigger, start, until) or [None])[-1]
            assert latest_fire(trigger, start, until) == expected, until


# --- (d) sizes are checked where a request enters; the outbox never crash-loops on one event -------
from sluice.domain.datasets import (  # noqa: E402
    DatasetSpec,
    KeySpec,
    KeyType,
    Partition,
    Transaction,
    TransactionStatus,
    decide_commit,
)
from sluice.domain.errors import ResourceExhausted  # noqa: E402

DATASET = DatasetSpec("ns", "clicks", (KeySpec("hour", KeyType.INT),), "/data/clicks")


def test_thousands_of_partitions_or_oversized_ones_are_resource_exhausted_before_anything_is_stored():
    many = tuple(Partition({"hour": str(h)}, f"/data/clicks/{h}", 1, 1) for h in range(5000))
    with pytest.raises(ResourceExhausted) as error:
        decide_commit(DATASET, Transaction(1, TransactionStatus.OPEN), many, T0)
    assert error.value.field == "partitions" and "limit" in error.value.message
    fat = (Partition({"hour": "1"}, "/data/clicks/1", 1, 1, {"note": "x" * 300_000}),)
    with pytest.raises(ResourceExhausted) as error:
        decide_commit(DATASET, Transaction(1, TransactionStatus.OPEN), fat, T0)
    assert error.value.field == "partitions[0].metadata"


def test_schedule_properties_over_the_limit_are_resource_exhausted():
    with pytest.raises(ResourceExhausted) as error:
        schedule_from_proto(_schedule_message(properties={"big": "x" * (1024 * 1024)}), "sid")
    assert error.value.field == "schedule.properties" and "limit" in error.value.message


def test_a_notification_too_big_for_the_bus_is_refused_where_it_is_published():
    message = pb.Notification(id="n", partition_committed=pb.PartitionCommitted(namespace="ns", dataset="clicks",
        partitions=[pb.PartitionRef(key=[pb.KeyValue(name="hour", value=str(h))], location=f"/d/{h}" + "x" * 200)
                    for h in range(2000)]))
    message.time.seconds = int(T0.timestamp())
    from sluice.wire.common import notification_from_proto
    with pytest.raises(ResourceExhausted) as error:
        notification_from_proto(message)
    assert error.value.field == "notification.partition_committed.partitions"


async def test_the_outbox_dead_letters_an_event_too_big_for_the_bus_and_carries_on(tmp_path):
    from sluice.bus.topics import DEAD_LETTER, JOBS
    from sluice.eventlog.port import ANY_VERSION, NewEvent
    from sluice.runtime.outbox import OutboxRelay, Outgoing
    log = SqliteEventLog(tmp_path / "events.db")
    try:
        log.append("s-big", [NewEvent("e-big", "Happened", b"x" * (1024 * 1024 + 1))], ANY_VERSION)
        log.append("s-ok", [NewEvent("e-ok", "Happened", b"ok")], ANY_VERSION)
        sent = []

        class Producer:
            async def send_batch(self, messages):
                assert all(len(m.value) <= 256 * 1024 for m in messages), "a message too big for the bus"
                sent.extend(messages)
                return [(0, i) for i in range(len(messages))]

        relay = OutboxRelay("t", log, Producer(), lambda e: [Outgoing(JOBS, e.stream, e.data)])
        assert await relay.publish_pending() == 2
        assert [m.topic for m in sent] == [DEAD_LETTER, JOBS]
        headers = dict(sent[0].headers)
        assert b"oversized" in headers["reason"] and headers["sluice-event-id"] == b"e-big"
        assert sent[1].value == b"ok"
    finally:
        log.close()


# --- (e) ListSchedules is paged; the client follows the pages ------------------------------------
async def test_list_schedules_is_paged_under_the_message_limit_and_the_client_reads_every_page(tmp_path):
    from sluice.client import SluiceClient
    from sluice.domain.schedules import schedule_id_for
    from sluice.domain.triggers import PartitionTrigger
    from sluice_services.registry.grpc_api import ScheduleRegistryServicer
    from sluice_services.registry.service import RegistryService
    log = SqliteEventLog(tmp_path / "events.db", clock=SimulatedClock(T0))
    try:
        registry = RegistryService(log, SimulatedClock(T0))
        program = ProgramRef("ns", "a", "p")
        for index in range(40):
            name = f"s{index:02}"
            registry.create(Schedule(schedule_id_for(program, name), name, program, PartitionTrigger("ns", "d", 1),
                                     properties={"big": "x" * 60_000}))
        servicer = ScheduleRegistryServicer(registry)
        first = await servicer.ListSchedules(spb.ListSchedulesRequest(page_size=10), AbortingContext())
        assert [s.name for s in first.schedules] == [f"s{i:02}" for i in range(10)] and first.next_page_token
        assert first.ByteSize() < 4 * 1024 * 1024
        names, token, pages = [], "", 0
        while True:
            page = await servicer.ListSchedules(spb.ListSchedulesRequest(page_token=token), AbortingContext())
            names += [s.name for s in page.schedules]
            pages, token = pages + 1, page.next_page_token
            assert page.ByteSize() <= 2 * 1024 * 1024 + 1024
            if not token:
                break
        assert names == [f"s{i:02}" for i in range(40)] and pages > 1  # 40 x 60 kB: over 2 MiB in one page

        client = SluiceClient.__new__(SluiceClient)
        calls = []

        class Recording:
            def ListSchedules(self, request, timeout=None):
                calls.append(request.page_token)
                return pages_by_token[request.page_token]
        pages_by_token = {"": spb.ListSchedulesResponse(schedules=[spb.Schedule(name="a")], next_page_token="t1"),
                          "t1": spb.ListSchedulesResponse(schedules=[spb.Schedule(name="b")])}
        client.schedules, client._timeout = Recording(), None
        assert [s.name for s in client.list_schedules()] == ["a", "b"] and calls == ["", "t1"]
    finally:
        log.close()
