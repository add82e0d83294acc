"""A job decoded from a message and encoded again (the checker passing on what the matcher sent) is
the message it came from; one listed with a state does not keep that state when passed on."""
import copy

from sluice.domain.jobs import JobState
from sluice.domain.matching import MatchNotification
from sluice.v1 import jobs_pb2 as pb
from sluice.wire.jobs import job_from_proto, job_to_proto
from tests.unit.test_matching import notification, observed, run, schedule


def fired_job():
    _, events = run(observed(schedule(count=2)), MatchNotification(notification(1)), MatchNotification(notification(2)))
    return events[-1].job


def test_a_job_passed_on_encodes_to_what_a_fresh_copy_encodes_to():
    sent = job_to_proto(fired_job())
    received = job_from_proto(pb.Job.FromString(sent.SerializeToString()))
    assert job_to_proto(received) == job_to_proto(copy.deepcopy(received)) == sent


def test_a_job_listed_with_a_state_is_not_passed_on_with_it():
    listed = job_to_proto(fired_job(), JobState.PENDING_LAUNCH, "constraints met")
    received = job_from_proto(pb.Job.FromString(listed.SerializeToString()))
    again = job_to_proto(received)
    assert again.state == pb.JOB_STATE_UNSPECIFIED and again.reason == ""
