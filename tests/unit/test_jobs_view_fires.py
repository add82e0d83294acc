"""The jobs view: the same lifecycle for a job fired by its only notification (one JobTriggered)
as for one that waited for several (JobCreated, NotificationMatched..., JobTriggered); the events
that carry a whole job read for the fields it shows, the fired job decoded from its event on demand."""
import gc
import logging
from datetime import timedelta

from sluice.eventlog import codec
from sluice.domain.checking import JobAdmitted, JobsAdmitted
from sluice.domain.jobs import JobState
from sluice.domain.matching import JobTriggered, MatchNotification, stream_name
from sluice.domain.runs import RunRequested
from sluice.eventlog.port import RecordedEvent
from sluice.readmodels.jobs import JobsView
from sluice.runtime.journal import Journal

from tests.unit.test_matching import T0, notification, observed, run, schedule
from tests.unit.test_matching_fast_paths import large_notification


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


def test_a_fired_job_is_kept_as_its_event_and_decoded_when_asked_for():
    _, events = run(observed(schedule(count=2)), *[MatchNotification(notification(n)) for n in range(2)])
    [fired] = [event for event in events if isinstance(event, JobTriggered)]
    view = JobsView()
    records = recorded(events)
    for event in records:
        view.apply(event)
    job = view.get(fired.job.id)
    assert job.fired == records[-1].data
    assert job.job == fired.job and job.job.context.notifications == (notification(0), notification(1))


def test_admission_and_run_are_read_from_the_events_carrying_the_whole_job():
    _, events = run(observed(schedule()), MatchNotification(notification(0)))
    [fired] = events
    later = T0 + timedelta(minutes=5)
    view = JobsView()
    for event in recorded([*events, JobAdmitted(fired.job, later, forced=True),
                           RunRequested("run-1", fired.job, later + timedelta(seconds=1))]):
        view.apply(event)
    job = view.get(fired.job.id)
    assert job.state is JobState.LAUNCHED and job.run_id == "run-1" and job.updated_at == later + timedelta(seconds=1)
    assert [(t.state, t.at, t.cause) for t in job.history[1:]] == [
        (JobState.PENDING_CONSTRAINT, fired.at, "trigger satisfied"),
        (JobState.PENDING_LAUNCH, later, "timed out, launch forced"),
        (JobState.LAUNCHED, later + timedelta(seconds=1), "run run-1")]
    assert job.notifications == 1 and job.created_at == fired.job.created_at


def test_an_admission_of_several_jobs_moves_each_to_pending_launch():
    _, events = run(observed(schedule()), MatchNotification(notification(0)), MatchNotification(notification(1)))
    fired = [event.job for event in events if isinstance(event, JobTriggered)]
    later = T0 + timedelta(minutes=5)
    view = JobsView()
    for event in recorded([*events, JobsAdmitted(tuple(fired), later, forced=(fired[1].id,))]):
        view.apply(event)
    assert [(view.get(job.id).state, view.get(job.id).history[-1].cause) for job in fired] == [
        (JobState.PENDING_LAUNCH, "constraints met"), (JobState.PENDING_LAUNCH, "timed out, launch forced")]


def test_a_jobs_history_leaves_the_cyclic_collector_alone():
    _, events = run(observed(schedule(count=2)), *[MatchNotification(notification(n)) for n in range(2)])
    view = JobsView()
    for event in recorded(events):
        view.apply(event)
    [job] = view.list()
    gc.collect()  # untracks the (state, at, cause) tuples,
    gc.collect()  # then the tuple holding them
    assert len(job.history) == 2 and not gc.is_tracked(job.transitions)


def test_the_older_shape_of_a_jobs_events_gives_the_same_view():
    """Logs from before one event per decision: JobCreated, a NotificationMatched per notification,
    a JobTriggered naming none."""
    from dataclasses import replace
    from sluice.domain.matching import JobCreated, NotificationMatched

    _, events = run(observed(schedule(count=2)), *[MatchNotification(notification(n)) for n in range(2)])
    first, fired = events
    older = [JobCreated(first.job_id, "sched-1", 1, first.at), replace(first, schedule_id=""),
             NotificationMatched(first.job_id, notification(1), fired.at), replace(fired, notification_id="")]
    views = []
    for shape in (events, older):
        view = JobsView()
        for event in recorded(shape):
            view.apply(event)
        [job] = view.list()
        views.append((job.notifications, job.partitions, job.history, job.created_at, job.schedule_id))
    assert views[0] == views[1] and views[0][:2] == (2, (("experiments", "clickstream", 2),))


def journal_lines(events: list, service: str) -> list:
    """The log records the journal writes for these events."""
    lines = []
    handler = logging.Handler()
    handler.emit = lines.append
    logger = logging.getLogger("sluice.journal")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        for event in recorded(events):
            Journal(None, (), service).write(event)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return lines


def test_the_journal_says_job_created_for_the_match_that_created_it_only():
    _, events = run(observed(schedule(count=3)), *[MatchNotification(notification(n)) for n in range(2)])
    assert [(line.getMessage(), line.schedule_id, line.state) for line in journal_lines(events, "matcher")] == [
        ("job created, waiting for its trigger", "sched-1", "PENDING_TRIGGER")]


def test_the_journal_writes_a_line_per_job_of_an_admission():
    _, events = run(observed(schedule()), MatchNotification(notification(0)), MatchNotification(notification(1)))
    fired = [event.job for event in events if isinstance(event, JobTriggered)]
    lines = journal_lines([JobsAdmitted(tuple(fired), T0)], "checker")
    assert [(line.getMessage(), line.job_id, line.schedule_id, line.state) for line in lines] == [
        ("job admitted: its run's launch is requested", job.id, "sched-1", "PENDING_LAUNCH") for job in fired]


def test_a_cron_fire_that_names_the_next_job_shows_it_waiting():
    from dataclasses import replace
    from sluice.domain.matching import CheckTime, step
    from sluice.domain.triggers import TimeTrigger

    start = observed(replace(schedule(), trigger=TimeTrigger("0 * * * *")))
    [fired], _ = step(start, CheckTime(), T0 + timedelta(hours=1))
    view = JobsView()
    for event in recorded([fired]):
        view.apply(event)
    waiting = view.get(fired.next_job_id)
    assert waiting is not None and waiting.state is JobState.PENDING_TRIGGER and waiting.schedule_id == "sched-1"
    assert view.get(fired.job.id).state is JobState.PENDING_CONSTRAINT


def test_the_jobs_of_a_fire_cut_by_size_each_show_their_own_notifications():
    _, events = run(observed(schedule(count=7 * 250)), *[MatchNotification(large_notification(n)) for n in range(7)])
    fires = [event for event in events if isinstance(event, JobTriggered)]
    assert len(fires) == 3
    view = JobsView()
    records = recorded(events)
    for event in records:
        view.apply(event)
    jobs = [view.get(fire.job.id) for fire in fires]
    assert [job.notifications for job in jobs] == [len(fire.job.context.notifications) for fire in fires] == [3, 3, 1]
    assert all(job.state is JobState.PENDING_CONSTRAINT for job in jobs)
    assert [job.job for job in jobs] == [fire.job for fire in fires]
    assert jobs[1].history[0].cause == f"part of job {fires[0].job.id}'s fire, cut by size"
