"""The jobs view shows the same lifecycle for a job fired by its only notification (one JobTriggered)
as for one that waited for several (JobCreated, NotificationMatched..., JobTriggered)."""
from sluice.domain import codec
from sluice.domain.jobs import JobState
from sluice.domain.matching import MatchNotification, stream_name
from sluice.eventlog.port import RecordedEvent
from sluice.readmodels.jobs import JobsView

from tests.unit.test_matching import T0, notification, observed, run, schedule


def recorded(events: list) -> list[RecordedEvent]:
    return [RecordedEvent(f"e{i}", stream_name("sched-1"), i, i + 1, type(event).__name__,
                          codec.encode(event, f"e{i}").data, {}, T0) for i, event in enumerate(events)]


def lifecycle(count: int, notifications: int) -> tuple[tuple[JobState, str], ...]:
    _, events = run(observed(schedule(count=count)), *[MatchNotification(notification(n)) for n in range(notifications)])
    view = JobsView()
    for event in recorded(events):
        view.apply(event)
    [job] = view.list()
    assert job.notifications == notifications and job.state is JobState.PENDING_CONSTRAINT
    return tuple((transition.state, transition.cause) for transition in job.history)


def test_a_job_fired_by_its_first_notification_was_pending_its_trigger_first():
    assert lifecycle(count=1, notifications=1) == lifecycle(count=2, notifications=2) == (
        (JobState.PENDING_TRIGGER, "first matching notification"), (JobState.PENDING_CONSTRAINT, "trigger satisfied"))
