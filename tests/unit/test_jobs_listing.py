"""The jobs view lists jobs oldest first (creation time, then id) from sorted keys kept as jobs are
created: by schedule, pending only, and from a page token's key on, also after a snapshot restore."""
from __future__ import annotations

from datetime import timedelta

from sluice.domain import matching
from sluice.eventlog.codec import encode
from sluice.eventlog.port import NO_STREAM
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.readmodels.jobs import JobsView, listing_key, snapshots_of

from tests.unit.test_map_snapshots import T0

CREATED = [("j3", "s1", 30), ("j1", "s2", 10), ("j2", "s1", 20), ("j5", "s2", 20), ("j4", "s1", 0)]
"""(job, schedule, seconds after T0 it was created): the log holds them out of creation order."""


def logged(tmp_path) -> SqliteEventLog:
    log = SqliteEventLog(tmp_path / "events.db")
    for job_id, schedule_id, seconds in CREATED:
        log.append(matching.stream_name(job_id), [encode(
            matching.JobCreated(job_id, schedule_id, 1, T0 + timedelta(seconds=seconds)), f"c-{job_id}")], NO_STREAM)
    log.append(matching.stream_name("j2"), [encode(matching.JobDiscarded("j2", "s1", "schedule deleted", T0), "d-j2")], 0)
    return log


def ids(listing) -> list[str]:
    return [view.id for _, view in listing]


def test_jobs_are_listed_by_creation_time_then_id_whatever_the_log_order(tmp_path):
    log = logged(tmp_path)
    view = JobsView()
    view.recover(log)
    assert ids(view.listing()) == ["j4", "j1", "j2", "j5", "j3"]
    assert ids(view.listing("s1")) == ["j4", "j2", "j3"]
    assert ids(view.listing(pending_only=True)) == ["j4", "j1", "j5", "j3"]
    assert ids(view.listing("s1", pending_only=True)) == ["j4", "j3"]
    assert ids(view.listing("unknown")) == [] and [job.id for job in view.list("s2")] == ["j1", "j5"]
    log.close()


def test_a_listing_resumes_after_a_key_even_when_jobs_were_created_before_it_since(tmp_path):
    log = logged(tmp_path)
    view = JobsView()
    view.recover(log)
    [(key, _), _] = list(view.listing())[:2]
    assert ids(view.listing(after=key)) == ["j1", "j2", "j5", "j3"]
    log.append(matching.stream_name("j0"), [encode(matching.JobCreated("j0", "s1", 1, T0 - timedelta(hours=1)), "c0")],
               NO_STREAM)
    log.append(matching.stream_name("j9"), [encode(matching.JobCreated("j9", "s1", 1, T0 + timedelta(hours=1)), "c9")],
               NO_STREAM)
    for recorded in log.read_all(view.position, 100):
        view.apply(recorded)
    assert ids(view.listing(after=key)) == ["j1", "j2", "j5", "j3", "j9"]  # the next page neither repeats nor skips
    assert ids(view.listing())[0] == "j0"
    log.close()


def test_a_restored_view_lists_as_the_one_that_folded_the_log(tmp_path):
    log = logged(tmp_path)
    view = JobsView()
    view.recover(log)
    view.snapshot(snapshots_of(log))
    again = JobsView()
    again.restore(snapshots_of(log))
    for args in [(), ("s1",), ("", True), ("s2", True)]:
        assert list(again.listing(*args)) == list(view.listing(*args))
    assert [key for key, _ in again.listing()] == sorted(listing_key(job) for job in again.list())
    log.close()


def finish(log: SqliteEventLog, job_id: str) -> None:
    log.append(matching.stream_name(job_id), [encode(matching.JobDiscarded(job_id, "s1", "disabled", T0), f"d-{job_id}")],
               0)


def history(tmp_path, name: str, finishing: list[str], keep: int) -> tuple[JobsView, SqliteEventLog]:
    """Six jobs of s1 created a minute apart (j0 oldest), `finishing` discarded in that order."""
    log = SqliteEventLog(tmp_path / f"{name}.db")
    for minute in range(6):
        log.append(matching.stream_name(f"j{minute}"), [encode(
            matching.JobCreated(f"j{minute}", "s1", 1, T0 + timedelta(minutes=minute)), f"c{minute}")], NO_STREAM)
    for job_id in finishing:
        finish(log, job_id)
    view = JobsView(finished_per_schedule=keep)
    view.recover(log)
    return view, log


def test_a_schedule_keeps_its_newest_finished_jobs_whatever_order_they_finished_in(tmp_path):
    kept = []
    for name, order in (("a", ["j4", "j0", "j2", "j1"]), ("b", ["j0", "j1", "j2", "j4"]), ("c", ["j1", "j4", "j2", "j0"])):
        view, log = history(tmp_path, name, order, keep=2)
        kept.append(ids(view.listing("s1")))
        assert ids(view.listing()) == ids(view.listing("s1")) and view.get("j0") is None
        assert ids(view.listing(pending_only=True)) == ["j3", "j5"]
        log.close()
    assert kept == [["j2", "j3", "j4", "j5"]] * 3  # pending jobs are never forgotten


def test_forgotten_jobs_stay_forgotten_in_its_snapshots_and_a_smaller_history_trims_a_restored_view(tmp_path):
    view, log = history(tmp_path, "a", ["j0", "j1", "j2", "j4"], keep=3)
    assert ids(view.listing()) == ["j1", "j2", "j3", "j4", "j5"]
    store = snapshots_of(log)
    view.snapshot(store)
    finish(log, "j5")
    for recorded in log.read_all(view.position, 100):
        view.apply(recorded)
    view.snapshot(store)  # a delta: j5 finished, j1 forgotten
    again = JobsView(finished_per_schedule=3)
    again.restore(snapshots_of(log))
    assert ids(again.listing()) == ids(view.listing()) == ["j2", "j3", "j4", "j5"]
    smaller = JobsView(finished_per_schedule=1)
    smaller.restore(snapshots_of(log))
    assert ids(smaller.listing()) == ["j3", "j5"]
    log.close()


def test_many_forgotten_jobs_leave_the_listing_exact(tmp_path):
    log = SqliteEventLog(tmp_path / "events.db")
    view = JobsView(finished_per_schedule=2)
    for index in range(300):
        job_id, schedule_id = f"j{index:03d}", f"s{index % 3}"
        log.append(matching.stream_name(job_id), [
            encode(matching.JobCreated(job_id, schedule_id, 1, T0 + timedelta(seconds=index)), f"c{index}"),
            encode(matching.JobDiscarded(job_id, schedule_id, "disabled", T0), f"d{index}")], NO_STREAM)
    view.recover(log)
    newest = [f"j{index:03d}" for index in range(294, 300)]
    assert ids(view.listing()) == newest and [job.id for job in view.list("s0")] == ["j294", "j297"]
    [(key, _)] = list(view.listing())[2:3]
    assert ids(view.listing(after=key)) == newest[3:]
    log.close()
