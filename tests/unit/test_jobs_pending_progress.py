"""What a PENDING_TRIGGER job waits for, end to end below the server: the jobs view counts the
partitions its matched notifications carried (per dataset), ListJobs hands them out
(Job.partitions_matched), and the CLI says `1 of 2 partitions of ns.ds`."""
from __future__ import annotations

from google.protobuf import timestamp_pb2

from sluice.cli import describe
from sluice.domain.matching import MatchNotification
from sluice.readmodels.jobs import JobsView
from sluice.v1 import schedules_pb2 as spb
from sluice_services.checker.grpc_api import _to_proto
from tests.unit.test_jobs_view_fires import recorded
from tests.unit.test_matching import notification, observed, run, schedule

AT = timestamp_pb2.Timestamp(seconds=1_800_000_000)


def partitions(namespace: str, dataset: str, count: int) -> spb.Trigger:
    return spb.Trigger(partition=spb.PartitionTrigger(namespace=namespace, dataset=dataset, count=count))


def test_the_view_counts_the_partitions_a_pending_job_matched_and_list_jobs_hands_them_out():
    _, events = run(observed(schedule(count=5)), MatchNotification(notification(1, partitions=2)),
                    MatchNotification(notification(2)))
    view = JobsView()
    for event in recorded(events):
        view.apply(event)
    (job,) = view.list()
    assert job.notifications == 2 and job.partitions == (("experiments", "clickstream", 3),)
    message = _to_proto(job, None)
    assert message.notifications_matched == 2
    assert [(m.namespace, m.dataset, m.partitions) for m in message.partitions_matched] == [
        ("experiments", "clickstream", 3)]


def test_a_partition_trigger_says_how_many_of_its_partitions_came():
    trigger = partitions("ns", "ds", 2)
    assert describe.waiting_for(trigger, AT, AT, 1, {("ns", "ds"): 1}) == "1 of 2 partitions of ns.ds"
    daily = spb.Trigger(time=spb.TimeTrigger(cron="0 2 * * *", zone="Asia/Tokyo"))
    either = spb.Trigger(**{"or": spb.OrTrigger(any_of=[partitions("ns", "ds", 24), daily])})
    assert describe.waiting_for(either, AT, AT, 1, {("ns", "ds"): 1}) == \
        "(1 of 24 partitions of ns.ds) or (cron at 02:00 Asia/Tokyo)"
    both = spb.Trigger(**{"and": spb.AndTrigger(all_of=[partitions("ns", "left", 2), partitions("ns", "right", 1)])})
    assert describe.waiting_for(both, AT, AT, 1, {("ns", "left"): 1}) == \
        "(1 of 2 partitions of ns.left) and (0 of 1 partition of ns.right)"


def test_without_a_count_it_can_tell_the_trigger_is_described_with_the_notifications_so_far():
    filtered = partitions("ns", "ds", 2)
    filtered.partition.filter["hour"].values.append("01")  # other partitions may have come along
    assert describe.waiting_for(filtered, AT, AT, 1, {("ns", "ds"): 3}) == "2 partitions of ns.ds; 1 notification so far"
    assert describe.waiting_for(partitions("ns", "ds", 2), AT, AT, 1) == "2 partitions of ns.ds; 1 notification so far"
    quiet = spb.Trigger(quiet_period=spb.QuietPeriodTrigger(namespace="ns", dataset="ds", quiet_seconds=60))
    later = timestamp_pb2.Timestamp(seconds=AT.seconds + 30)
    assert describe.waiting_for(quiet, AT, later, 2, {("ns", "ds"): 2}).startswith("quiet until ")
    assert describe.waiting_for(quiet, AT, later, 2, {("ns", "ds"): 2}).endswith("; 2 notifications so far")
