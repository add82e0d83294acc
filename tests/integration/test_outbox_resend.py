"""A crash between the outbox's send and its save, after 100 notifications on one dataset: no duplicate
job (issue 25). The relay republishes all 100 under new offsets; the matcher recognises them by the
relay's name and log position (`sluice-outbox` / `sluice-outbox-position`, recorded per relay and source
partition with its events), not by a window of a schedule's last 16 notification ids.

The real OutboxRelay and the production registry and matcher (its two stages, or one member's fused
handler) on a SQLite log and the in-process bus, pumped synchronously (tests/support/pump.py)."""
from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from sluice.eventlog.batched import expand_all
from sluice.bus.inprocess import InProcessBus
from sluice.bus.topics import PARTITION_NOTIFICATIONS
from sluice.clock import SimulatedClock
from sluice.domain.common import Notification, PartitionCommitted, PartitionRef, ProgramRef
from sluice.domain.matching import RECENT_PER_SCHEDULE, JobTriggered
from sluice.domain.schedules import Schedule, schedule_id_for
from sluice.domain.triggers import PartitionTrigger
from sluice.eventlog.port import NO_STREAM, Checkpoint, NewEvent, RecordedEvent, StreamAppend
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.ids import derived_id
from sluice.runtime.outbox import OutboxRelay, Outgoing
from sluice.wire.common import notification_to_proto
from sluice_services.composition import matcher_spec, registry_spec
from sluice_services.registry.service import RegistryService
from tests.support.pump import BusPump

pytestmark = pytest.mark.integration

PROGRAM = ProgramRef("experiments", "clickstream", "hourly_metrics")
SCHEDULE = Schedule(schedule_id_for(PROGRAM, "every-hour"), "every-hour", PROGRAM,
                    PartitionTrigger("experiments", "clickstream", 1), enabled=True)
BURST = 100


class CrashOnSave(BaseException):
    """The process dies after the send, before the position is saved (a BaseException, like a kill)."""


class CrashingSaves:
    """The log, with the outbox's next position save dying once."""

    def __init__(self, log: SqliteEventLog) -> None:
        self._log = log
        self.armed = True

    def save_checkpoint(self, checkpoint: Checkpoint) -> None:
        if self.armed and checkpoint.name.startswith("outbox:"):
            self.armed = False
            raise CrashOnSave(checkpoint)
        self._log.save_checkpoint(checkpoint)

    def __getattr__(self, name):
        return getattr(self._log, name)


def route(recorded: RecordedEvent) -> list[Outgoing]:
    """As the launcher's datasets route: one partition notification per committed transaction."""
    if not recorded.stream.startswith("tx-"):
        return []
    hour = json.loads(recorded.data)["hour"]
    notification = Notification(derived_id(recorded.id, "notification"), recorded.recorded_at, PartitionCommitted(
        "experiments", "clickstream", (PartitionRef({"hour": hour}, f"/data/clickstream/{hour}"),)))
    return [Outgoing(PARTITION_NOTIFICATIONS, notification.event_key(),
                     notification_to_proto(notification).SerializeToString())]


def jobs_triggered(log: SqliteEventLog) -> list[str]:
    return [event.id for event in expand_all(log.read_all(0, 1_000_000)) if event.type == JobTriggered.__name__]


@pytest.mark.parametrize("one_member", [False, True], ids=["two-stages", "one-member"])
@pytest.mark.parametrize("matched_before_the_resend", [True, False])
async def test_a_crash_between_send_and_save_after_100_notifications_fires_no_duplicate_job(
        tmp_path, matched_before_the_resend, one_member):
    assert BURST > RECENT_PER_SCHEDULE  # the old window could not have recognised these
    clock = SimulatedClock(datetime(2026, 11, 26, 9, tzinfo=timezone.utc))
    log = SqliteEventLog(tmp_path / "events.db", clock=clock)
    bus = InProcessBus(clock=clock)
    producer = bus.producer()
    RegistryService(log, clock).create(SCHEDULE)
    pump = BusPump(bus, log, clock, [registry_spec(log, clock, producer),
                                     matcher_spec(log, clock, producer, one_member=one_member)])
    await pump.start()

    log.append_batch([StreamAppend(f"tx-{hour}", [NewEvent(derived_id("tx", str(hour)), "PartitionsCommitted",
                                                           json.dumps({"hour": f"{hour:03d}"}).encode())], NO_STREAM)
                      for hour in range(BURST)])
    crashing = CrashingSaves(log)
    relay = OutboxRelay("launcher", crashing, producer, route, prefixes=("tx-",))
    with pytest.raises(CrashOnSave):
        await relay.publish_pending()  # all 100 sent in one batch; the save dies
    assert log.read_checkpoint("outbox:launcher") is None
    if matched_before_the_resend:
        await pump.settle()
        assert len(jobs_triggered(log)) == BURST

    restarted = OutboxRelay("launcher", log, producer, route, prefixes=("tx-",))  # the process again, from the saved position
    assert await restarted.publish_pending() == BURST  # every one of them again, under new offsets
    await pump.settle()

    jobs = jobs_triggered(log)
    assert len(jobs) == len(set(jobs)) == BURST
    consumer = bus.consumer("probe", [PARTITION_NOTIFICATIONS])
    records = []
    while batch := await consumer.poll(timeout=0):
        records += batch
    assert len(records) == 2 * BURST  # the resend was really on the bus
    await producer.close()
    await bus.close()
    log.close()
