"""Triggers: specs, validation, codec, observe/evaluate, composites, and the user stories of
seed 000 driven on a simulated timeline (plain datetimes, no sleeping)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.eventlog.codec import EventTypes, encode
from sluice.domain.common import (
    Notification, PartitionCommitted, PartitionRef, ProgramRef, ProgramStatusChanged, RunStatus,
)
from sluice.domain.triggers import (
    MAX_DEPTH, AndTrigger, DataSizeTrigger, ElapsedTrigger, Evaluation, OrTrigger, PartitionTrigger,
    ProgramStatusTrigger, QuietPeriodTrigger, TimeTrigger, Trigger, TriggerState, evaluate, event_keys,
    matched_notifications, observe, start, time_alone_can_satisfy, validate_trigger,
)
from sluice.eventlog.port import RecordedEvent
from sluice.domain.errors import InvalidArgument, ResourceExhausted

T0 = datetime(2026, 6, 1, tzinfo=timezone.utc)
GB = 1 << 30
A = ProgramRef("ns", "etl", "A")


def at(hours: float = 0, minutes: float = 0, seconds: float = 0) -> datetime:
    return T0 + timedelta(hours=hours, minutes=minutes, seconds=seconds)


def parts(nid: str, dataset: str = "a", *regions: str, size: int = 100, ns: str = "ns") -> Notification:
    refs = tuple(PartitionRef({"region": r, "n": nid}, f"/data/{dataset}/{nid}/{r}", size) for r in regions or ("US",))
    return Notification(nid, T0, PartitionCommitted(ns, dataset, refs))


def run_status(nid: str, run_id: str, status: RunStatus, program: ProgramRef = A) -> Notification:
    return Notification(nid, T0, ProgramStatusChanged(program, run_id, status))


def feed(trigger: Trigger, *notifications: Notification, now: datetime = T0) -> TriggerState:
    state = start(trigger, T0)
    for n in notifications:
        state = observe(trigger, state, n, now)
    return state


ALL_KINDS = [
    TimeTrigger("30 2 * * *", "America/New_York"),
    PartitionTrigger("ns", "a", 3, {"region": ("US", "EU")}),
    DataSizeTrigger("ns", "a", 100 * GB),
    ProgramStatusTrigger("ns", "etl", "A", ("COMPLETED", "FAILED"), 2),
    QuietPeriodTrigger("ns", "a", 900, {"region": ("US",)}),
    ElapsedTrigger(3600),
    AndTrigger((PartitionTrigger("ns", "a"), OrTrigger((TimeTrigger("0 * * * *"), ElapsedTrigger(60))))),
    OrTrigger((AndTrigger((DataSizeTrigger("ns", "b", 5),)), QuietPeriodTrigger("ns", "c", 5))),
]


# Specs and the codec
@dataclass(frozen=True)
class Saved:
    trigger: Trigger
    state: TriggerState | None = None


def roundtrip(event: Saved) -> Saved:
    new = encode(event, "e-1")
    return EventTypes([Saved]).decode(RecordedEvent(new.id, "s", 0, 1, new.type, new.data, {}, T0))


@pytest.mark.parametrize("trigger", ALL_KINDS, ids=lambda t: type(t).__name__)
def test_every_kind_validates_round_trips_through_the_codec_and_is_hashable(trigger):
    validate_trigger(trigger)
    decoded = roundtrip(Saved(trigger)).trigger
    assert decoded == trigger and type(decoded) is type(trigger)
    assert hash(decoded) == hash(trigger)


def test_every_kind_has_its_own_field_names_so_the_codec_can_tell_them_apart():
    kinds = [TimeTrigger, PartitionTrigger, DataSizeTrigger, ProgramStatusTrigger, QuietPeriodTrigger,
             ElapsedTrigger, AndTrigger, OrTrigger]
    names = [frozenset(f.name for f in dataclasses.fields(k)) for k in kinds]
    assert len(set(names)) == len(kinds)


def test_trigger_state_round_trips_through_the_codec():
    trigger = AndTrigger((PartitionTrigger("ns", "a"), ProgramStatusTrigger("ns", "etl", "A"), QuietPeriodTrigger("ns", "a", 6)))
    state = feed(trigger, parts("n1", "a", "US", "EU"), run_status("n2", "r1", RunStatus.COMPLETED))
    assert roundtrip(Saved(trigger, state)) == Saved(trigger, state)


def test_lists_and_dicts_are_frozen_on_construction():
    built = PartitionTrigger("ns", "a", 1, {"region": ["US"]})
    assert built == PartitionTrigger("ns", "a", 1, {"region": ("US",)}) and hash(built)
    assert AndTrigger([ElapsedTrigger(1)]).all_of == (ElapsedTrigger(1),)
    assert ProgramStatusTrigger("ns", "etl", "A", (RunStatus.FAILED,)).statuses == ("FAILED",)


def test_event_keys_are_the_matchers_reverse_index():
    trigger = OrTrigger((AndTrigger((PartitionTrigger("ns", "a"), DataSizeTrigger("ns", "b", 1))),
                         ProgramStatusTrigger("ns", "etl", "A", ("COMPLETED", "KILLED")),
                         TimeTrigger("0 0 * * *"), ElapsedTrigger(5)))
    assert event_keys(trigger) == {"partition:ns.a", "partition:ns.b",
                                   "program:ns.etl.A.COMPLETED", "program:ns.etl.A.KILLED"}
    assert event_keys(TimeTrigger("0 0 * * *")) == frozenset()
    assert time_alone_can_satisfy(trigger) and not time_alone_can_satisfy(PartitionTrigger("ns", "a"))
    assert not time_alone_can_satisfy(AndTrigger((ElapsedTrigger(5), PartitionTrigger("ns", "a"))))


# Validation
@pytest.mark.parametrize("trigger, field", [
    (None, "schedule.trigger"),
    ("hourly", "schedule.trigger"),
    (TimeTrigger("61 * * * *"), "schedule.trigger.time.cron"),
    (TimeTrigger("* * * *"), "schedule.trigger.time.cron"),
    (TimeTrigger("0 0 1 1 * 2030"), "schedule.trigger.time.cron"),
    (TimeTrigger("0 0 31 2 *"), "schedule.trigger.time.cron"),
    (TimeTrigger("0 0 * * *", "Mars/Olympus"), "schedule.trigger.time.zone"),
    (TimeTrigger("0 0 * * *", "localtime"), "schedule.trigger.time.zone"),
    (TimeTrigger("0 0 * * *", ""), "schedule.trigger.time.zone"),
    (TimeTrigger("0 0 * * *", "Europe"), "schedule.trigger.time.zone"),  # a directory of the zone database
    (TimeTrigger("0 0 * * *", "A" * 300), "schedule.trigger.time.zone"),  # too long for a file name
    (AndTrigger(()), "schedule.trigger.and.all_of"),
    (OrTrigger(()), "schedule.trigger.or.any_of"),
    (PartitionTrigger("ns", "a", 0), "schedule.trigger.partition.count"),
    (PartitionTrigger("ns", "", 1), "schedule.trigger.partition.dataset"),
    (PartitionTrigger("ns", "a", 1, {"region": ()}), "schedule.trigger.partition.filter[region]"),
    (DataSizeTrigger("ns", "a", 0), "schedule.trigger.data_size.min_bytes"),
    (QuietPeriodTrigger("ns", "a", -5), "schedule.trigger.quiet_period.quiet_seconds"),
    (ElapsedTrigger(-1), "schedule.trigger.elapsed.seconds"),
    (ElapsedTrigger(0), "schedule.trigger.elapsed.seconds"),
    (ProgramStatusTrigger("ns", "etl", "A", ("RUNNING",)), "schedule.trigger.program_status.statuses[0]"),
    (ProgramStatusTrigger("ns", "etl", "A", ()), "schedule.trigger.program_status.statuses"),
    (ProgramStatusTrigger("ns", "etl", "A", count=0), "schedule.trigger.program_status.count"),
    (AndTrigger((PartitionTrigger("ns", "a"), TimeTrigger("bad cron here x"))), "schedule.trigger.and.all_of[1].time.cron"),
    (OrTrigger((ElapsedTrigger(1), AndTrigger((PartitionTrigger("ns", "a"), PartitionTrigger("ns", "b", 0))))),
     "schedule.trigger.or.any_of[1].and.all_of[1].partition.count"),
])
def test_bad_triggers_name_their_field(trigger, field):
    with pytest.raises(InvalidArgument) as raised:
        validate_trigger(trigger)
    assert raised.value.field == field


def test_a_cron_expression_over_its_size_limit_is_resource_exhausted_naming_the_field():
    """Each fire time computed parses the expression again: 0.2 s for one of 100,000 comma-separated days."""
    with pytest.raises(ResourceExhausted) as raised:
        validate_trigger(OrTrigger((ElapsedTrigger(1), TimeTrigger("0 0 * * " + ",".join(["1"] * 1000)))))
    assert raised.value.field == "schedule.trigger.or.any_of[1].time.cron" and "limit of 1024" in raised.value.message


def test_unknown_program_is_rejected_when_the_registry_says_so():
    trigger = OrTrigger((ElapsedTrigger(1), ProgramStatusTrigger("ns", "etl", "B")))
    validate_trigger(trigger, known_program=lambda ref: True)
    with pytest.raises(InvalidArgument) as raised:
        validate_trigger(trigger, path="s.t", known_program=lambda ref: ref != ProgramRef("ns", "etl", "B"))
    assert raised.value.field == "s.t.or.any_of[1].program_status.program"


def test_nesting_is_bounded():
    trigger: Trigger = ElapsedTrigger(1)
    for _ in range(MAX_DEPTH - 1):
        trigger = AndTrigger((trigger,))
    validate_trigger(trigger)
    with pytest.raises(InvalidArgument, match="nest"):
        validate_trigger(OrTrigger((trigger,)))


# Leaves
def test_partition_trigger_counts_matching_partitions_not_notifications():
    trigger = PartitionTrigger("ns", "a", 3, {"region": ("US", "EU")})
    state = feed(trigger, parts("n1", "a", "US", "JP"), parts("n2", "b", "US"), parts("n3", "a", "EU"),
                 parts("n4", "a", "US", ns="other"))
    assert state.leaves[0].count == 2 and not evaluate(trigger, state, T0).satisfied
    state = observe(trigger, state, parts("n5", "a", "EU", "US"), T0)
    assert evaluate(trigger, state, T0) == Evaluation(True, None, None)


def test_duplicates_and_non_matching_notifications_return_the_same_state():
    trigger = PartitionTrigger("ns", "a", 2)
    state = feed(trigger, parts("n1"))
    assert observe(trigger, state, parts("n1"), at(1)) is state
    assert observe(trigger, state, parts("n9", "b"), at(1)) is state
    assert observe(trigger, state, run_status("n8", "r", RunStatus.COMPLETED), at(1)) is state
    assert not evaluate(trigger, state, at(1)).satisfied


def test_data_size_sums_the_sizes_of_matching_partitions():
    trigger = DataSizeTrigger("ns", "a", 250, {"region": ("US",)})
    state = feed(trigger, parts("n1", "a", "US", "EU", size=100), parts("n2", "a", "US", size=100))
    assert state.leaves[0].size_bytes == 200 and not evaluate(trigger, state, T0).satisfied
    assert evaluate(trigger, observe(trigger, state, parts("n3", "a", "US", size=50), T0), T0).satisfied


def test_program_status_counts_distinct_runs_in_the_chosen_statuses():
    trigger = ProgramStatusTrigger("ns", "etl", "A", ("COMPLETED",), count=2)
    state = feed(trigger, run_status("n1", "r1", RunStatus.FAILED), run_status("n2", "r2", RunStatus.COMPLETED),
                 run_status("n3", "r2", RunStatus.COMPLETED),
                 run_status("n4", "r3", RunStatus.COMPLETED, ProgramRef("ns", "etl", "B")))
    assert state.leaves[0].count == 1 and not evaluate(trigger, state, T0).satisfied
    state = observe(trigger, state, run_status("n5", "r4", RunStatus.COMPLETED), T0)
    assert evaluate(trigger, state, T0).satisfied
    assert [n.id for n in matched_notifications(trigger, state)] == ["n2", "n5"]


def test_quiet_period_resets_its_wake_time_on_each_matching_chunk():
    trigger = QuietPeriodTrigger("ns", "a", 900, {"region": ("US",)})
    state = start(trigger, T0)
    assert evaluate(trigger, state, at(hours=5)) == Evaluation(False, None)
    state = observe(trigger, state, parts("c1"), at(minutes=1))
    assert evaluate(trigger, state, at(minutes=2)) == Evaluation(False, at(minutes=16))
    state = observe(trigger, state, parts("c2"), at(minutes=10))
    assert evaluate(trigger, state, at(minutes=16)) == Evaluation(False, at(minutes=25))
    state = observe(trigger, state, parts("x", "a", "EU"), at(minutes=20))  # filtered out: no reset
    assert evaluate(trigger, state, at(minutes=25) - timedelta(microseconds=1)).wake_at == at(minutes=25)
    assert evaluate(trigger, state, at(minutes=25)).satisfied


def test_elapsed_counts_from_the_start_of_the_wait_inclusive():
    trigger = ElapsedTrigger(3600)
    state = start(trigger, at(hours=2))
    assert evaluate(trigger, state, at(hours=2.5)) == Evaluation(False, at(hours=3))
    assert evaluate(trigger, state, at(hours=3)) == Evaluation(True, None, None)


def test_a_state_of_another_trigger_is_refused():
    with pytest.raises(ValueError):
        evaluate(AndTrigger((ElapsedTrigger(1), ElapsedTrigger(2))), start(ElapsedTrigger(1), T0), T0)
    with pytest.raises(ValueError):
        start(ElapsedTrigger(1), datetime(2026, 1, 1))  # naive: the domain never guesses a zone


# Composites
def test_and_of_or_needs_one_of_the_alternatives_and_the_rest():
    a, b, c = (PartitionTrigger("ns", dataset) for dataset in "abc")
    trigger = AndTrigger((OrTrigger((a, b)), c))
    assert not evaluate(trigger, feed(trigger, parts("1", "a"), parts("2", "b")), T0).satisfied
    assert evaluate(trigger, feed(trigger, parts("1", "b"), parts("2", "c")), T0).satisfied
    assert not evaluate(trigger, feed(trigger, parts("1", "c")), T0).satisfied
    both = AndTrigger((PartitionTrigger("ns", "a", 2), DataSizeTrigger("ns", "a", 200)))  # one notification, two leaves
    assert evaluate(both, feed(both, parts("1", "a", "US", "EU", size=100)), T0).satisfied


def test_and_wakes_when_its_last_timed_child_would_be_satisfied_or_never_by_time():
    timed = AndTrigger((ElapsedTrigger(60), OrTrigger((TimeTrigger("30 * * * *"), ElapsedTrigger(7200)))))
    assert evaluate(timed, start(timed, T0), T0) == Evaluation(False, at(minutes=30))
    assert evaluate(timed, start(timed, T0), at(minutes=45)) == Evaluation(True, None, at(minutes=30))
    waiting_for_data = AndTrigger((ElapsedTrigger(60), PartitionTrigger("ns", "a")))
    assert evaluate(waiting_for_data, start(waiting_for_data, T0), T0) == Evaluation(False, None)


def test_matched_notifications_hand_over_the_admitted_partitions_in_arrival_order():
    trigger = OrTrigger((PartitionTrigger("ns", "a", 9, {"region": ("US",)}), ProgramStatusTrigger("ns", "etl", "A"),
                         DataSizeTrigger("ns", "b", 1 << 40)))
    state = feed(trigger, parts("1", "a", "US", "EU"), run_status("2", "r1", RunStatus.COMPLETED),
                 parts("3", "a", "EU"), parts("4", "b", "EU", "JP"))
    handed = matched_notifications(trigger, state)
    assert [n.id for n in handed] == ["1", "2", "4"]
    assert [p.location for p in handed[0].payload.partitions] == ["/data/a/1/US"]
    assert [p.key["region"] for p in handed[2].payload.partitions] == ["EU", "JP"]


def test_evaluation_is_pure():
    trigger = OrTrigger((AndTrigger((PartitionTrigger("ns", "a"), QuietPeriodTrigger("ns", "a", 60))),
                         TimeTrigger("0 9 * * *", "Asia/Tokyo")))
    state = feed(trigger, parts("1"), now=at(minutes=1))
    snapshot = dataclasses.replace(state)
    results = {evaluate(trigger, state, at(minutes=1, seconds=30)) for _ in range(3)}
    assert results == {Evaluation(False, at(minutes=2))} and state == snapshot
    assert evaluate(trigger, state, datetime(2001, 1, 1, tzinfo=timezone.utc)).wake_at is not None


# Properties
LEAF_TRIGGERS = st.builds(PartitionTrigger, st.just("ns"), st.sampled_from("ab"), st.integers(1, 4),
                          st.sampled_from([{}, {"region": ("US",)}, {"region": ("EU", "JP")}]))
TREES = st.recursive(LEAF_TRIGGERS, lambda sub: st.one_of(
    st.lists(sub, min_size=1, max_size=3).map(lambda c: AndTrigger(tuple(c))),
    st.lists(sub, min_size=1, max_size=3).map(lambda c: OrTrigger(tuple(c)))), max_leaves=6)
NOTIFICATIONS = st.lists(st.builds(lambda i, ds, regions: parts(f"n{i}", ds, *regions),
                                   st.integers(0, 12), st.sampled_from("abc"),
                                   st.lists(st.sampled_from(["US", "EU", "JP"]), min_size=1, max_size=3)),
                         max_size=15)


@settings(max_examples=100, deadline=None)
@given(TREES, NOTIFICATIONS)
def test_more_partitions_never_unsatisfy_and_observing_twice_changes_nothing(trigger, notifications):
    state, was_satisfied = start(trigger, T0), False
    for n in notifications:
        once = observe(trigger, state, n, T0)
        assert observe(trigger, once, n, T0) is once
        state = once
        satisfied = evaluate(trigger, state, T0).satisfied
        assert satisfied or not was_satisfied
        was_satisfied = satisfied


# User stories (seed 000) on a simulated timeline
@dataclass(frozen=True)
class Fired:
    at: datetime
    logical_time: datetime | None
    notifications: tuple[Notification, ...]

    def partition_ids(self) -> list[str]:
        return [n.id for n in self.notifications if isinstance(n.payload, PartitionCommitted)]


def simulate(trigger: Trigger, arrivals: list[tuple[datetime, Notification]], until: datetime) -> list[Fired]:
    """The matcher's loop: one pending job at a time, observed on each arrival and otherwise woken
    only at its wake_at (one timer, never polling). A job waits from the start (and right after
    each fire) when time alone can satisfy the trigger, else from its first matching notification."""
    eager = time_alone_can_satisfy(trigger)
    fired: list[Fired] = []
    state: TriggerState | None = start(trigger, T0) if eager else None

    def check(now: datetime) -> Evaluation:
        nonlocal state
        result = evaluate(trigger, state, now)
        if not result.satisfied:
            return result
        fired.append(Fired(now, result.logical_time, matched_notifications(trigger, state)))
        state = start(trigger, now) if eager else None
        return evaluate(trigger, state, now) if state else Evaluation(False)

    result = check(T0) if state else Evaluation(False)
    for when, notification in [*arrivals, (until, None)]:
        while result.wake_at is not None and result.wake_at <= when:
            result = check(result.wake_at)
        if notification is None:
            return fired
        fresh = start(trigger, when)
        observed = observe(trigger, state or fresh, notification, when)
        if observed is not fresh:
            state = observed
            result = check(when)
    return fired


def test_story_3_daily_feed_at_unknown_times_runs_only_when_data_arrives():
    day1, day2 = at(hours=13, minutes=17), at(hours=24 + 4, minutes=2)
    fired = simulate(PartitionTrigger("ns", "feed"), [(day1, parts("d1", "feed")), (day2, parts("d2", "feed"))], at(hours=72))
    assert [(f.at, f.partition_ids()) for f in fired] == [(day1, ["d1"]), (day2, ["d2"])]


def test_story_4_b_runs_after_a_succeeded_and_never_after_a_failed():
    trigger = ProgramStatusTrigger("ns", "etl", "A", ("COMPLETED",))
    arrivals = [(at(hours=1), run_status("s1", "r1", RunStatus.FAILED)),
                (at(hours=2), run_status("s2", "r2", RunStatus.COMPLETED)),
                (at(hours=3), run_status("s3", "r3", RunStatus.KILLED))]
    fired = simulate(trigger, arrivals, at(hours=9))
    assert [(f.at, [n.payload.run_id for n in f.notifications]) for f in fired] == [(at(hours=2), ["r2"])]


def test_story_5_rare_feeds_run_at_most_once_a_day_and_only_with_new_data():
    trigger = AndTrigger((PartitionTrigger("ns", "feed"), TimeTrigger("0 3 * * *")))
    arrivals = [(at(hours=10), parts("d1", "feed")), (at(hours=11), parts("d1b", "feed")),
                (at(hours=24 * 2 + 14), parts("d3", "feed"))]
    fired = simulate(trigger, arrivals, at(hours=24 * 5))
    assert [(f.at, f.logical_time, f.partition_ids()) for f in fired] == [
        (at(hours=24 + 3), at(hours=24 + 3), ["d1", "d1b"]),  # the first daily tick after the data
        (at(hours=24 * 3 + 3), at(hours=24 * 3 + 3), ["d3"]),  # none at day 2's tick: no data before it
    ]  # and none at day 4's tick: no new data


def test_story_8_join_runs_when_all_inputs_arrived_or_after_a_timeout_with_what_exists():
    join = AndTrigger((PartitionTrigger("ns", "orders"), PartitionTrigger("ns", "users")))
    trigger = OrTrigger((join, ElapsedTrigger(6 * 3600)))
    both = simulate(trigger, [(at(hours=1), parts("o1", "orders")), (at(hours=2), parts("u1", "users"))], at(hours=3))
    assert [(f.at, f.partition_ids()) for f in both] == [(at(hours=2), ["o1", "u1"])]
    one = simulate(trigger, [(at(hours=1), parts("o1", "orders"))], at(hours=7))
    assert [(f.at, f.partition_ids()) for f in one] == [(at(hours=6), ["o1"])]  # 6 h after the job began
    some_data = AndTrigger((OrTrigger(join.all_of), trigger))  # ...but only with data, 6 h after the first
    assert [f.at for f in simulate(some_data, [(at(hours=1), parts("o1", "orders"))], at(hours=9))] == [at(hours=7)]
    assert simulate(some_data, [], at(hours=48)) == []


def test_story_9_a_burst_of_chunks_runs_once_after_the_last_chunk():
    quiet = QuietPeriodTrigger("ns", "feed", 15 * 60)
    chunks = [(at(hours=5, minutes=m), parts(f"c{m}", "feed")) for m in (0, 4, 11, 13)]
    fired = simulate(quiet, chunks, at(hours=12))
    assert [(f.at, len(f.partition_ids())) for f in fired] == [(at(hours=5, minutes=28), 4)]
    known_count = simulate(PartitionTrigger("ns", "feed", 4), chunks, at(hours=12))
    assert [(f.at, len(f.partition_ids())) for f in known_count] == [(at(hours=5, minutes=13), 4)]


def test_story_10_frequent_data_accumulates_until_enough_bytes_or_enough_time():
    every_second = [(at(seconds=s), parts(f"s{s}", "clicks", size=1 << 20)) for s in range(1, 121)]
    by_size = simulate(DataSizeTrigger("ns", "clicks", 50 << 20), every_second, at(seconds=121))
    assert [f.at for f in by_size] == [at(seconds=50), at(seconds=100)]
    by_time = simulate(AndTrigger((PartitionTrigger("ns", "clicks"), ElapsedTrigger(30))), every_second, at(seconds=121))
    assert [f.at for f in by_time] == [at(seconds=31), at(seconds=61), at(seconds=91), at(seconds=121)]
    handed = [p for f in by_time for p in f.partition_ids()]  # each job waits 30 s from its first data
    assert handed == [f"s{s}" for s in range(1, 121)]


def test_story_11_runs_at_least_every_four_hours_and_sooner_on_a_burst():
    trigger = OrTrigger((DataSizeTrigger("ns", "events", 100 * GB), ElapsedTrigger(4 * 3600)))
    arrivals = [(at(hours=1), parts("b1", "events", size=60 * GB)), (at(hours=1.5), parts("b2", "events", size=50 * GB)),
                (at(hours=6), parts("b3", "events", size=30 * GB))]
    fired = simulate(trigger, arrivals, at(hours=12))
    assert [(f.at, f.partition_ids()) for f in fired] == [
        (at(hours=1.5), ["b1", "b2"]), (at(hours=5.5), []), (at(hours=9.5), ["b3"])]
