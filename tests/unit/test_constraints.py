"""Run constraints: specs, codec, validation, each constraint's verdict (exact next checks, DST),
the fold of run-status events, and atomic admission over the whole queue -- user stories 6 and 7
of seed 000 on a simulated timeline (plain datetimes, no sleeping)."""
from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.eventlog.codec import EventTypes, encode
from sluice.domain.common import ProgramRef, RunStatus
from sluice.domain.constraints import (
    KINDS, SATISFIED, Capacity, ConcurrencyConstraint, Constraint, DelayConstraint, MaxRunsPerWindowConstraint,
    MinSinceLastRunConstraint, Never, NotMetPolicy, NotYet, PendingJobFacts, TimeoutPolicy, TimeWindowConstraint,
    WorldFacts, admit, check, history_needed, validate_constraint, validate_constraints,
)
from sluice.eventlog.port import RecordedEvent
from sluice.domain.errors import InvalidArgument

NY = "America/New_York"
P, Q, R = (ProgramRef("ns", "etl", name) for name in ("P", "Q", "R"))
T0 = datetime(2026, 6, 1, 12, tzinfo=timezone.utc)
ABORT = NotMetPolicy.ABORT


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=timezone.utc)


def at(minutes: float = 0, hours: float = 0) -> datetime:
    return T0 + timedelta(hours=hours, minutes=minutes)


def job(job_id: str, *constraints: Constraint, program: ProgramRef = P, triggered: datetime = T0, priority: int = 0,
        timeout: int = 0, policy: TimeoutPolicy = TimeoutPolicy.DISCARD, checked: bool = False) -> PendingJobFacts:
    return PendingJobFacts(job_id, program, f"s-{program.program}", triggered, constraints, priority, timeout,
                           policy, checked)


def running(*programs: ProgramRef, started: datetime = T0) -> WorldFacts:
    world = WorldFacts()
    for index, program in enumerate(programs):
        world = world.observe(program, f"run-{index}", RunStatus.RUNNING, started)
    return world


ALL_KINDS = [
    ConcurrencyConstraint(2, group="nightly", on_not_met=ABORT),
    DelayConstraint(600),
    TimeWindowConstraint("22:00", "06:00", NY),
    MinSinceLastRunConstraint(4 * 3600),
    MaxRunsPerWindowConstraint(1, "day", NY, ABORT),
]


# Specs, codec, validation
@dataclass(frozen=True)
class Saved:
    constraints: tuple[Constraint, ...]


@pytest.mark.parametrize("constraint", ALL_KINDS, ids=lambda c: type(c).__name__)
def test_every_kind_validates_round_trips_through_the_codec_and_is_hashable(constraint):
    validate_constraint(constraint, "schedule.constraints[0]")
    new = encode(Saved((constraint,)), "e-1")
    decoded = EventTypes([Saved]).decode(RecordedEvent(new.id, "s", 0, 1, new.type, new.data, {}, T0))
    assert decoded == Saved((constraint,)) and type(decoded.constraints[0]) is type(constraint)
    assert hash(decoded.constraints[0]) == hash(constraint)


def test_every_kind_has_its_own_field_names_and_waits_by_default():
    assert len({frozenset(f.name for f in dataclasses.fields(kind)) for kind in KINDS}) == len(KINDS)
    assert {kind(*args).on_not_met for kind, args in [(ConcurrencyConstraint, ()), (DelayConstraint, (1,)),
            (TimeWindowConstraint, ("01:00", "02:00")), (MinSinceLastRunConstraint, (1,)),
            (MaxRunsPerWindowConstraint, (1,))]} == {NotMetPolicy.WAIT}
    assert all(member.__doc__ for policy in (NotMetPolicy, TimeoutPolicy) for member in policy)


@pytest.mark.parametrize("constraint, field, message", [
    (TimeWindowConstraint("02:00", "02:00"), ".time_window.end", "must differ from start"),
    (TimeWindowConstraint("25:00", "02:00"), ".time_window.start", "HH:MM expected"),
    (TimeWindowConstraint("01:30", "2am"), ".time_window.end", "HH:MM expected"),
    (TimeWindowConstraint("01:00", "02:00", "Mars/Olympus_Mons"), ".time_window.zone", "unknown time zone"),
    (TimeWindowConstraint("01:00", "02:00", "localtime"), ".time_window.zone", "unknown time zone"),
    (TimeWindowConstraint("01:00", "02:00", "America"), ".time_window.zone", "unknown time zone"),
    (MaxRunsPerWindowConstraint(1, "day", "é" * 200), ".max_runs_per_window.zone", "unknown time zone"),
    (DelayConstraint(-1), ".delay.seconds", "at least 0"),
    (DelayConstraint(1.5), ".delay.seconds", "whole number"),
    (ConcurrencyConstraint(0), ".concurrency.max_running", "at least 1"),
    (ConcurrencyConstraint(1, "a group"), ".concurrency.group", "white space"),
    (MinSinceLastRunConstraint(0), ".min_since_last_run.min_seconds", "at least 1"),
    (MaxRunsPerWindowConstraint(0), ".max_runs_per_window.max_runs", "at least 1"),
    (MaxRunsPerWindowConstraint(1, "week"), ".max_runs_per_window.unit", "hour, day"),
    (MaxRunsPerWindowConstraint(1, "day", "Nowhere"), ".max_runs_per_window.zone", "unknown time zone"),
    (DelayConstraint(1, "WAIT"), ".delay.on_not_met", "WAIT, ABORT"),
    ("max 2", "", "unknown constraint type str"),
])
def test_bad_constraints_name_their_field(constraint, field, message):
    with pytest.raises(InvalidArgument) as error:
        validate_constraints([DelayConstraint(0), constraint])
    assert error.value.field == f"schedule.constraints[1]{field}" and message in error.value.message


# Each constraint on its own
def test_concurrency_counts_the_program_or_its_group():
    world = running(P)
    assert check(ConcurrencyConstraint(1), job("j"), world, T0) == NotYet(None)
    assert check(ConcurrencyConstraint(2), job("j"), world, T0) == SATISFIED
    assert check(ConcurrencyConstraint(1), job("j", program=Q), world, T0) == SATISFIED
    grouped = world.join("g", P)
    assert check(ConcurrencyConstraint(1, "g"), job("j", program=Q), grouped, T0) == NotYet(None)
    assert check(ConcurrencyConstraint(2, "g"), job("j", program=Q), grouped, T0) == SATISFIED
    assert check(ConcurrencyConstraint(1, "other"), job("j", program=Q), grouped, T0) == SATISFIED
    done = world.observe(P, "run-0", RunStatus.COMPLETED, at(5))
    assert check(ConcurrencyConstraint(1), job("j"), done, T0) == SATISFIED


@pytest.mark.parametrize("window, now, verdict", [
    (("09:00", "17:00"), utc(2026, 6, 1, 8, 59, 59), NotYet(utc(2026, 6, 1, 9))),
    (("09:00", "17:00"), utc(2026, 6, 1, 9), SATISFIED),
    (("09:00", "17:00"), utc(2026, 6, 1, 16, 59, 59), SATISFIED),
    (("09:00", "17:00"), utc(2026, 6, 1, 17), NotYet(utc(2026, 6, 2, 9))),
    (("22:00", "06:00"), utc(2026, 6, 1, 21, 59), NotYet(utc(2026, 6, 1, 22))),
    (("22:00", "06:00"), utc(2026, 6, 1, 23, 30), SATISFIED),
    (("22:00", "06:00"), utc(2026, 6, 2, 0, 0), SATISFIED),
    (("22:00", "06:00"), utc(2026, 6, 2, 5, 59, 59), SATISFIED),
    (("22:00", "06:00"), utc(2026, 6, 2, 6, 0), NotYet(utc(2026, 6, 2, 22))),
], ids=str)
def test_time_window_is_half_open_and_wraps_midnight(window, now, verdict):
    assert check(TimeWindowConstraint(*window), job("j"), WorldFacts(), now) == verdict


def test_delay_counts_from_the_trigger_min_since_last_run_from_the_last_start_whatever_its_outcome():
    assert check(DelayConstraint(600), job("j"), WorldFacts(), at(9.99)) == NotYet(at(10))
    assert check(DelayConstraint(600), job("j"), WorldFacts(), at(10)) == SATISFIED
    gap = MinSinceLastRunConstraint(2 * 3600)
    assert check(gap, job("j"), WorldFacts(), T0) == SATISFIED
    world = running(P, started=at(hours=-1)).observe(P, "run-0", RunStatus.FAILED, at(hours=-0.5))
    assert check(gap, job("j"), world, T0) == NotYet(at(hours=1))
    assert check(gap, job("j"), world, at(hours=1)) == SATISFIED
    assert check(gap, job("j", program=Q), world, T0) == SATISFIED
    older = world.observe(P, "run-1", RunStatus.STARTING, at(hours=-3))
    assert check(gap, job("j"), older, T0) == NotYet(at(hours=1))


def test_max_runs_per_hour_counts_starts_in_the_current_clock_hour():
    world = running(P, P, started=at(5)).observe(P, "old", RunStatus.STARTING, at(-1))
    cap = MaxRunsPerWindowConstraint(2, "hour")
    assert check(cap, job("j"), world, at(30)) == NotYet(at(60))
    assert check(replace(cap, max_runs=3), job("j"), world, at(30)) == SATISFIED
    assert check(cap, job("j"), world, at(60)) == SATISFIED


def test_abort_is_never_at_the_first_check_and_waits_afterwards():
    for constraint in (ConcurrencyConstraint(1, on_not_met=ABORT), DelayConstraint(60, ABORT),
                       TimeWindowConstraint("22:00", "06:00", on_not_met=ABORT)):
        assert isinstance(check(constraint, job("j"), running(P), T0), Never)
        assert isinstance(check(constraint, job("j", checked=True), running(P), T0), NotYet)
    assert check(DelayConstraint(60, ABORT), job("j"), WorldFacts(), at(1)) == SATISFIED


# DST: the window is read on the zone's wall clock
WINDOW_1_30 = TimeWindowConstraint("01:30", "02:30", NY)
NIGHT = TimeWindowConstraint("22:00", "06:00", NY)


@pytest.mark.parametrize("window, now, verdict", [
    # 2026-03-08: 02:00 EST (07:00Z) jumps to 03:00 EDT; 01:30-02:30 exists only as 01:30-02:00 EST
    (WINDOW_1_30, utc(2026, 3, 8, 5, 0), NotYet(utc(2026, 3, 8, 6, 30))),
    (WINDOW_1_30, utc(2026, 3, 8, 6, 59, 59), SATISFIED),
    (WINDOW_1_30, utc(2026, 3, 8, 7, 0), NotYet(utc(2026, 3, 9, 5, 30))),  # 03:00 EDT; next 01:30 EDT
    (NIGHT, utc(2026, 3, 7, 20, 0), NotYet(utc(2026, 3, 8, 3, 0))),  # 22:00 EST
    (NIGHT, utc(2026, 3, 8, 9, 59, 59), SATISFIED),  # 05:59:59 EDT: the night had 7 hours
    (NIGHT, utc(2026, 3, 8, 10, 0), NotYet(utc(2026, 3, 9, 2, 0))),  # 06:00 EDT; next 22:00 EDT
    # 2026-11-01: 02:00 EDT (06:00Z) falls back to 01:00 EST; 01:00-02:00 happens twice
    (WINDOW_1_30, utc(2026, 11, 1, 4, 0), NotYet(utc(2026, 11, 1, 5, 30))),  # 01:30 EDT
    (WINDOW_1_30, utc(2026, 11, 1, 5, 59, 59), SATISFIED),
    (WINDOW_1_30, utc(2026, 11, 1, 6, 0), NotYet(utc(2026, 11, 1, 6, 30))),  # 01:00 EST; 01:30 EST again
    (WINDOW_1_30, utc(2026, 11, 1, 7, 29, 59), SATISFIED),  # 02:29:59 EST
    (WINDOW_1_30, utc(2026, 11, 1, 7, 30), NotYet(utc(2026, 11, 2, 6, 30))),  # next 01:30 EST
    (NIGHT, utc(2026, 10, 31, 20, 0), NotYet(utc(2026, 11, 1, 2, 0))),  # 22:00 EDT
    (NIGHT, utc(2026, 11, 1, 10, 59, 59), SATISFIED),  # 05:59:59 EST: the night had 9 hours
    (NIGHT, utc(2026, 11, 1, 11, 0), NotYet(utc(2026, 11, 2, 3, 0))),  # 06:00 EST; next 22:00 EST
    # a window can open where the offset jumps, not at its start
    (TimeWindowConstraint("00:30", "01:30", NY), utc(2026, 11, 1, 5, 30), NotYet(utc(2026, 11, 1, 6, 0))),
    (TimeWindowConstraint("02:00", "04:00", NY), utc(2026, 3, 8, 6, 0), NotYet(utc(2026, 3, 8, 7, 0))),
], ids=str)
def test_time_window_across_dst_gives_exact_utc_instants(window, now, verdict):
    assert check(window, job("j"), WorldFacts(), now) == verdict


@pytest.mark.parametrize("now, day_end", [
    (utc(2026, 3, 8, 12), utc(2026, 3, 9, 4)),  # a 23-hour day
    (utc(2026, 11, 1, 12), utc(2026, 11, 2, 5)),  # a 25-hour day
])
def test_max_runs_per_day_rolls_over_at_local_midnight_across_dst(now, day_end):
    world = running(P, started=day_end - timedelta(hours=22.5)).reserve(P, "before", day_end - timedelta(hours=26))
    cap = MaxRunsPerWindowConstraint(1, "day", NY)
    assert check(cap, job("j"), world, now) == NotYet(day_end)
    assert check(cap, job("j"), world, day_end) == SATISFIED


@settings(max_examples=60, deadline=None)
@given(start=st.integers(0, 24 * 4 - 1), length=st.integers(1, 24 * 4 - 1),
       now=st.datetimes(datetime(2026, 3, 6), datetime(2026, 11, 3)).map(lambda d: d.replace(tzinfo=timezone.utc)))
def test_next_check_of_a_window_is_the_first_minute_the_clock_shows_a_time_inside(start, length, now):
    hh_mm = lambda quarter: f"{quarter % 96 // 4:02}:{quarter % 4 * 15:02}"  # noqa: E731
    window = TimeWindowConstraint(hh_mm(start), hh_mm(start + length), NY)

    def inside(instant: datetime) -> bool:  # independent of the module: compare "HH:MM" strings
        wall = instant.astimezone(ZoneInfo(NY)).strftime("%H:%M")
        wrapped = wall >= window.start or wall < window.end
        return window.start <= wall < window.end if window.start < window.end else wrapped

    verdict = check(window, job("j"), WorldFacts(), now)
    assert (verdict == SATISFIED) == inside(now)
    if verdict != SATISFIED:
        minute = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
        while not inside(minute):
            minute += timedelta(minutes=1)
        assert verdict.next_check == minute


# The world, folded from run-status events
def test_world_folds_run_status_idempotently_and_in_any_order():
    world = WorldFacts().observe(P, "r1", RunStatus.STARTING, at(0))
    assert world.observe(P, "r1", RunStatus.RUNNING, at(1)) is world
    assert world.running(P) == 1 and world.last_start(P) == at(0)
    ended = world.observe(P, "r1", RunStatus.COMPLETED, at(9))
    assert ended.running(P) == 0 and ended.observe(P, "r1", RunStatus.KILLED, at(10)) is ended
    late = WorldFacts().observe(Q, "r2", RunStatus.FAILED, at(5)).observe(Q, "r2", RunStatus.STARTING, at(1))
    assert late.running(Q) == 0 and late.last_start(Q) == at(1)
    assert WorldFacts().reserve(P, "r3", at(0)).observe(P, "r3", RunStatus.STARTING, at(2)).last_start(P) == at(0)
    kept = ended.observe(P, "r4", RunStatus.RUNNING, at(-600)).forget(at(1))
    assert [r.run_id for r in kept.runs[P]] == ["r4"] and WorldFacts().forget(T0) == WorldFacts()
    both = ended.observe(Q, "q1", RunStatus.STARTING, at(0)).observe(Q, "q1", RunStatus.COMPLETED, at(2))
    assert both.forget(at(1), (Q,)).runs == {P: ended.runs[P]}  # only the programs named
    assert both.forget(at(1), (P, Q)).runs == {} and both.forget(at(-1), (P,)) is both
    assert history_needed(ALL_KINDS) == timedelta(hours=36)
    assert WorldFacts().join("g", P).join("g", Q).leave("g", P).members("g") == {Q}


# Atomic admission
def test_two_jobs_one_slot_exactly_one_launches_the_other_waits_for_a_run_to_end():
    one = ConcurrencyConstraint(1)
    jobs = [job("b", one, triggered=at(1)), job("a", one, triggered=at(2))]
    decision = admit(jobs, WorldFacts(), at(3))
    assert decision.launch == ("b",) and decision.discard == () and decision.wake_at is None
    assert [w.job_id for w in decision.waiting] == ["a"] and decision.waiting[0].next_check is None
    world = WorldFacts().reserve(P, jobs[0].run_id, at(3))
    assert admit(jobs[1:], world, at(4)).launch == ()
    world = world.observe(P, jobs[0].run_id, RunStatus.COMPLETED, at(30))
    assert admit([replace(jobs[1], checked_before=True)], world, at(30)).launch == ("a",)


def test_schedules_sharing_a_group_take_its_last_slot_once():
    jobs = [job("q", ConcurrencyConstraint(2, "nightly"), program=Q, triggered=at(2)),
            job("p", ConcurrencyConstraint(2, "nightly"), program=P, triggered=at(1))]
    decision = admit(jobs, running(R).join("nightly", R), at(3))  # R's schedule names the group too
    assert decision.launch == ("p",) and [w.job_id for w in decision.waiting] == ["q"]
    assert admit(jobs, running(R), at(3)).launch == ("p", "q")  # R is not in the group
    one = [replace(j, constraints=(ConcurrencyConstraint(1, "nightly"),)) for j in jobs]
    assert admit(one, WorldFacts(), at(3)).launch == ("p",)


def test_a_waiting_job_wakes_when_its_last_timed_blocker_clears_or_its_deadline_comes():
    jobs = [job("w", DelayConstraint(600), TimeWindowConstraint("13:00", "14:00")),
            job("d", DelayConstraint(7200), timeout=1800),
            job("c", ConcurrencyConstraint(1), DelayConstraint(60), program=Q)]
    decision = admit(jobs, running(Q), T0)
    assert {w.job_id: w.next_check for w in decision.waiting} == {"w": at(60), "d": at(30), "c": None}
    assert decision.wake_at == at(30)


# User story 6: priority under load
def simulate(jobs: list[PendingJobFacts], ends: dict[str, datetime], capacity: Capacity) -> dict[str, datetime]:
    """Run admission at every trigger and run end; return when each job launched."""
    world, launched, pending = WorldFacts(), {}, {}
    by_id = {j.job_id: j for j in jobs}
    for now in sorted({j.triggered_at for j in jobs} | set(ends.values())):
        for job_id in [i for i, end in ends.items() if end == now and i in launched]:
            world = world.observe(by_id[job_id].program, by_id[job_id].run_id, RunStatus.COMPLETED, now)
        pending.update({j.job_id: j for j in jobs if j.triggered_at == now})
        decision = admit(pending.values(), world, now, capacity)
        for job_id in decision.launch:
            launched[job_id] = now
            world = world.reserve(pending[job_id].program, pending.pop(job_id).run_id, now)
        pending = {i: replace(j, checked_before=True) for i, j in pending.items()}
    return launched


def test_story_6_high_priority_launches_on_time_low_priority_catches_up_when_load_drops():
    capacity = Capacity(limit=2, high_priority=10, hard_limit=4)
    low = lambda name, minute: job(name, program=ProgramRef("ns", "lake", name), triggered=at(minute))  # noqa: E731
    high = lambda name, minute: replace(low(name, minute), priority=10)  # noqa: E731
    jobs = [low("L1", 0), low("L2", 0), low("L3", 10), high("H1", 10), high("H2", 20), low("L4", 30),
            high("H3", 40)]
    ends = {"L1": at(60), "H1": at(90), "L2": at(120), "H3": at(130), "H2": at(150), "L3": at(200), "L4": at(210)}
    launched = simulate(jobs, ends, capacity)
    # Past the soft limit (2) high-priority jobs launch on time, up to the hard limit (4): H3 found
    # 4 running at 00:40 and launched when L1 ended. L3 and L4 waited while 2 or more ran, and
    # caught up in trigger order as load dropped below 2 (H3 ended at 02:10, H2 at 02:30).
    assert launched == {"L1": at(0), "L2": at(0), "H1": at(10), "H2": at(20), "H3": at(60),
                        "L3": at(130), "L4": at(150)}
    # one slot left: the younger high-priority job takes it; the low one waits with no timer
    decision = admit([low("old", 0), high("young", 1)], running(R), at(2), Capacity(limit=2, high_priority=10))
    assert decision.launch == ("young",) and decision.wake_at is None and "load" in decision.waiting[0].reasons[0]


# User story 7: maintenance once a day within 22:00-06:00 (the trigger, "only if new data", is a
# partition trigger; what is left for constraints is the window and the daily cap)
def test_story_7_nightly_maintenance_within_its_window_once_per_night():
    window, daily = TimeWindowConstraint("22:00", "06:00", NY), MaxRunsPerWindowConstraint(1, "day", NY)
    first = job("j1", window, daily, triggered=utc(2026, 6, 1, 19))  # 15:00 EDT: new data
    assert admit([first], WorldFacts(), first.triggered_at).wake_at == utc(2026, 6, 2, 2)  # 22:00 EDT
    assert admit([first], WorldFacts(), utc(2026, 6, 2, 2)).launch == ("j1",)
    world = WorldFacts().reserve(P, first.run_id, utc(2026, 6, 2, 2))
    second = job("j2", window, daily, triggered=utc(2026, 6, 2, 3), checked=True)  # 23:00 EDT: more data
    # a calendar day starts at midnight, inside the night: the cap alone allows a second run then
    assert admit([second], world, second.triggered_at).wake_at == utc(2026, 6, 2, 4)
    # once per night: also require a gap longer than the window (8 h) and shorter than the day (16 h)
    nightly = replace(second, constraints=(window, daily, MinSinceLastRunConstraint(12 * 3600)))
    assert admit([nightly], world, nightly.triggered_at).wake_at == utc(2026, 6, 2, 14)
    assert admit([nightly], world, utc(2026, 6, 2, 14)).wake_at == utc(2026, 6, 3, 2)
    assert admit([nightly], world, utc(2026, 6, 3, 2)).launch == ("j2",)


# Timeouts, ABORT and WAIT
def test_timeout_discards_with_the_reason_or_force_launches_within_concurrency():
    closed = TimeWindowConstraint("22:00", "06:00")
    discarding = job("d", closed, timeout=600)
    assert admit([discarding], WorldFacts(), at(9)).waiting[0].next_check == at(10)
    [(job_id, reason)] = admit([discarding], WorldFacts(), at(10)).discard
    assert job_id == "d" and "timed out" in reason and "22:00-06:00" in reason
    forcing = job("f", closed, ConcurrencyConstraint(1), timeout=600, policy=TimeoutPolicy.FORCE_LAUNCH)
    decision = admit([forcing], running(P), at(10), Capacity(limit=1))
    assert decision.launch == () and decision.waiting[0].next_check is None
    decision = admit([forcing], WorldFacts(), at(10), Capacity(limit=1))
    assert decision.launch == decision.forced == ("f",)
    assert admit([forcing], running(Q, R), at(10), Capacity(limit=1, hard_limit=2)).launch == ()
    ready = job("r", DelayConstraint(600), timeout=600)  # ready at its deadline: launches
    assert admit([ready], WorldFacts(), at(10)).launch == ("r",)


def test_abort_discards_at_the_first_check_wait_keeps_the_job():
    window = TimeWindowConstraint("22:00", "06:00")
    decision = admit([job("a", replace(window, on_not_met=ABORT)), job("w", window)], WorldFacts(), T0)
    assert [d[0] for d in decision.discard] == ["a"] and "ABORT" in decision.discard[0][1]
    assert decision.wake_at == utc(2026, 6, 1, 22)
    delayed = job("x", replace(window, on_not_met=ABORT), DelayConstraint(3600), triggered=utc(2026, 6, 1, 5, 30))
    assert admit([delayed], WorldFacts(), delayed.triggered_at).discard == ()  # window met at the first check
    assert admit([replace(delayed, checked_before=True)], WorldFacts(), utc(2026, 6, 1, 6, 30)).wake_at \
        == utc(2026, 6, 1, 22)  # and later it waits for the window like WAIT


def test_admission_rejects_duplicate_ids_and_bad_capacity():
    with pytest.raises(ValueError):
        admit([job("a"), job("a", priority=1)], WorldFacts(), T0)
    with pytest.raises(InvalidArgument, match=r"^capacity\.hard_limit: must be at least the soft limit 3"):
        Capacity(limit=3, hard_limit=2)


# Property: admission never exceeds a concurrency limit, and is deterministic
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_admit_never_exceeds_any_concurrency_limit_and_is_deterministic(data):
    programs = [ProgramRef("ns", "app", f"p{i}") for i in range(4)]
    own = {p: data.draw(st.none() | st.integers(1, 3)) for p in programs}
    group_limit = data.draw(st.integers(1, 3))
    members = set(data.draw(st.lists(st.sampled_from(programs), max_size=4)))
    initial = {p: data.draw(st.integers(0, 3)) for p in programs}
    world = running(*(p for p in programs for _ in range(initial[p])))
    for p in members:  # the checker joins programs from their schedules; one with no runs may be
        if initial[p] or data.draw(st.booleans()):  # left to join by its pending jobs' constraints
            world = world.join("g", p)
    jobs = []
    for index in range(data.draw(st.integers(0, 12))):
        p = data.draw(st.sampled_from(programs))
        constraints = [ConcurrencyConstraint(own[p])] if own[p] else []
        constraints += [ConcurrencyConstraint(group_limit, "g")] if p in members else []
        constraints += [TimeWindowConstraint("22:00", "06:00")] if data.draw(st.booleans()) else []
        jobs.append(job(f"j{index}", *constraints, program=p, triggered=at(data.draw(st.integers(0, 5))),
                        priority=data.draw(st.integers(0, 2)), timeout=data.draw(st.sampled_from([0, 60, 600])),
                        policy=data.draw(st.sampled_from(TimeoutPolicy)), checked=data.draw(st.booleans())))
    limit = data.draw(st.none() | st.integers(1, 8))
    hard = None if limit is None else data.draw(st.none() | st.integers(limit, 12))
    capacity, now = Capacity(limit, 1, hard), at(data.draw(st.integers(0, 20)))
    decision = admit(jobs, world, now, capacity)
    assert admit(random.Random(data.draw(st.integers())).sample(jobs, len(jobs)), world, now, capacity) == decision
    launched = [next(j for j in jobs if j.job_id == i) for i in decision.launch]
    scopes = [({p}, own[p]) for p in programs if own[p]] + [(members, group_limit)]
    for scope, cap in scopes:
        before, added = sum(initial[p] for p in scope), sum(1 for j in launched if j.program in scope)
        assert added == 0 if before >= cap else before + added <= cap
    if hard is not None and sum(initial.values()) < hard:
        assert sum(initial.values()) + len(launched) <= hard
    assert len(set(decision.launch) | {d[0] for d in decision.discard} | {w.job_id for w in decision.waiting}) \
        == len(jobs) == len(decision.launch) + len(decision.discard) + len(decision.waiting)
