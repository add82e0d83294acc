"""A job's notifications are measured from the domain objects (sluice.domain.bounds.notifications_bytes):
never less than their protobuf encoding, and the budget holds one notification of the largest size
beside a schedule of the largest size."""
from __future__ import annotations

from datetime import datetime, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.domain import bounds
from sluice.domain.common import (
    Notification,
    PartitionCommitted,
    PartitionRef,
    ProgramRef,
    ProgramStatusChanged,
    RunStatus,
)
from sluice.domain.jobs import Job, TriggerContext
from sluice.domain.schedules import Schedule
from sluice.domain.triggers import PartitionTrigger
from sluice.v1 import jobs_pb2
from sluice.wire.common import notification_to_proto
from sluice.wire.jobs import job_to_proto
from sluice.wire.schedules import schedule_to_proto

T0 = datetime(2026, 11, 28, tzinfo=timezone.utc)
text = st.text(max_size=40)
counts = st.integers(0, bounds.MAX_BYTES)
partitions = st.builds(PartitionRef, st.dictionaries(text, text, max_size=4), text, counts, counts,
                       st.dictionaries(text, text, max_size=4))
payloads = st.one_of(
    st.builds(PartitionCommitted, text, text, st.lists(partitions, max_size=4).map(tuple)),
    st.builds(ProgramStatusChanged, st.builds(ProgramRef, text, text, text), text, st.sampled_from(RunStatus),
              text, text))
times = st.datetimes(min_value=bounds.EARLIEST_TIME.replace(tzinfo=None),
                     max_value=datetime(2999, 12, 31), timezones=st.just(timezone.utc))
notifications = st.builds(Notification, text.filter(bool), times, payloads)


def context_bytes(given: tuple[Notification, ...]) -> int:
    return jobs_pb2.TriggerContext(notifications=[notification_to_proto(n) for n in given]).ByteSize()


@settings(max_examples=300)
@given(st.lists(notifications, max_size=5).map(tuple))
def test_the_estimate_is_never_below_the_encoding_and_close_to_it(given):
    estimate, encoded = bounds.notifications_bytes(given), context_bytes(given)
    assert encoded <= estimate <= encoded + 40 * len(given) + 30 * sum(
        len(n.payload.partitions) for n in given if isinstance(n.payload, PartitionCommitted))


def largest_notification() -> Notification:
    """A partition notification of about MAX_NOTIFICATION_BYTES, encoded."""
    refs = tuple(PartitionRef({"hour": f"{index:04d}"}, "/" + "x" * 1000) for index in range(128))
    notification = Notification("n" * 64, T0, PartitionCommitted("ns", "feed", refs))
    assert bounds.MAX_NOTIFICATION_BYTES - 2_000 < notification_to_proto(notification).ByteSize() \
        <= bounds.MAX_NOTIFICATION_BYTES
    return notification


def test_the_largest_notification_fits_a_job_beside_the_largest_schedule():
    notification = largest_notification()
    in_context = context_bytes((notification,))
    assert in_context <= bounds.JOB_NOTIFICATIONS_BYTES
    assert bounds.MAX_SCHEDULE_BYTES + bounds.JOB_FIELDS_BYTES + in_context <= bounds.MAX_BUS_MESSAGE_BYTES


def test_a_job_holds_little_beside_its_schedule_and_notifications():
    schedule = Schedule("s" * 128, "n" * 128, ProgramRef("a" * 128, "b" * 128, "c" * 128),
                        PartitionTrigger("ns", "feed", 1), {"k": "v"}, enabled=True)
    job = Job("j" * 64, schedule.id, 2**31, schedule.program,
              TriggerContext(schedule.id, schedule.name, dict(schedule.properties), (), T0), T0,
              sequence=2**62, triggered_at=T0)
    beside = jobs_pb2.JobTriggered(job=job_to_proto(job)).ByteSize() - schedule_to_proto(schedule).ByteSize()
    assert beside < bounds.JOB_FIELDS_BYTES // 2
