"""Lineage domain: parsing real openlineage-python events, naming, and arrival-order independence."""
from __future__ import annotations

import itertools
import json
from datetime import datetime, timedelta, timezone
from functools import reduce

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.facet_v2 import parent_run
from openlineage.client.serde import Serde

from sluice.domain.lineage import (
    EMPTY,
    UNKNOWN,
    InvalidRunEvent,
    StaleLineageState,
    dataset_key,
    evolve,
    fold,
    parse_run_event,
    render_tree,
)
from sluice.domain.lineage_index import LineageIndex

T0 = datetime(2026, 3, 1, 10, 0, tzinfo=timezone.utc)
NS = "sluice"
SCHEDULE = "clickstream.hourly_metrics_on_arrival"
# UUIDv7s, as openlineage.client.uuid.generate_new_uuid() makes them (fixed so failures reproduce)
S = "0195499e-1a00-7000-8000-000000000001"
P1 = "0195499e-1a00-7000-8000-000000000011"
P2 = "0195499e-1a00-7000-8000-000000000012"
P3 = "0195499e-1a00-7000-8000-000000000013"
SPARK = "0195499e-1a00-7000-8000-000000000021"


def ol_event(run_id, event_type, seconds, job_name, *, parent=None, namespace=NS, inputs=(), outputs=(), **run_facets):
    """An event built with the official client models and serialized by its Serde, as a dict."""
    if parent is not None:
        parent_id, parent_ns, parent_name = parent
        run_facets["parent"] = parent_run.ParentRunFacet(
            run=parent_run.Run(runId=parent_id), job=parent_run.Job(namespace=parent_ns, name=parent_name)
        )
    event = RunEvent(
        eventType=event_type,
        eventTime=(T0 + timedelta(seconds=seconds)).isoformat(),
        run=Run(runId=run_id, facets=run_facets),
        job=Job(namespace=namespace, name=job_name),
        producer="https://github.com/example/sluice",
        inputs=[InputDataset(namespace="s3://lake", name=n) for n in inputs],
        outputs=[OutputDataset(namespace="s3://lake", name=n) for n in outputs],
    )
    return json.loads(Serde.to_json(event))


def record(*args, **kwargs):
    return parse_run_event(ol_event(*args, **kwargs))


# -- parsing ----------------------------------------------------------------------------------

def test_parses_an_event_serialized_by_the_openlineage_client():
    from openlineage.client.uuid import generate_new_uuid

    run_id, parent_id = str(generate_new_uuid()), str(generate_new_uuid())   # v7
    obj = ol_event(run_id, RunState.START, 0, "hourly_metrics", parent=(parent_id, NS, SCHEDULE),
                   inputs=["raw/clicks"], outputs=["metrics/hourly", "metrics/hourly"])
    obj["run"]["facets"]["vendor_custom"] = {"anything": [1, 2]}
    obj["run"]["facets"]["nominalTime"] = {}

    r = parse_run_event(obj)

    assert (r.run_id, r.event_type, r.event_time) == (run_id, "START", T0)
    assert (r.job_namespace, r.job_name) == (NS, "hourly_metrics")
    assert (r.parent.run_id, r.parent.job_namespace, r.parent.job_name) == (parent_id, NS, SCHEDULE)
    assert r.inputs == (dataset_key("s3://lake", "raw/clicks"),) and r.outputs == (dataset_key("s3://lake", "metrics/hourly"),)
    assert r.run_facets["vendor_custom"] == {"anything": [1, 2]} and r.run_facets["nominalTime"] == {}
    assert r.key == (run_id, "START", T0)


def test_event_time_is_normalized_to_utc_and_missing_event_type_is_other():
    obj = ol_event(P1, RunState.RUNNING, 0, "job")
    obj["eventTime"] = "2026-03-01T12:00:00.123456789+02:00"
    del obj["eventType"]
    r = parse_run_event(obj)
    assert r.event_time == T0.replace(microsecond=123456) and r.event_time.tzinfo is timezone.utc
    assert r.event_type == "OTHER"
    obj["eventTime"] = "2026-03-01T10:00:00Z"
    assert parse_run_event(obj).event_time == T0


def _broken(change):
    obj = ol_event(P1, RunState.START, 0, "hourly_metrics", parent=(S, NS, SCHEDULE))
    change(obj)
    return obj


@pytest.mark.parametrize(
    "change, field",
    [
        (lambda o: o["run"].pop("runId"), "run.runId"),
        (lambda o: o["run"].update(runId="not-a-uuid"), "run.runId"),
        (lambda o: o["run"].update(runId=P1 + "\n"), "run.runId"),
        (lambda o: o["run"].update(runId=42), "run.runId"),
        (lambda o: o.pop("run"), "run"),
        (lambda o: o["job"].update(name=""), "job.name"),
        (lambda o: o["job"].update(name="   "), "job.name"),
        (lambda o: o["job"].pop("namespace"), "job.namespace"),
        (lambda o: o.update(eventTime="yesterday"), "eventTime"),
        (lambda o: o.update(eventTime="2026-03-01T10:00:00"), "eventTime"),        # no offset
        (lambda o: o.pop("eventTime"), "eventTime"),
        (lambda o: o.update(eventType="FINISHED"), "eventType"),
        (lambda o: o.update(eventType=""), "eventType"),
        (lambda o: o["run"]["facets"]["parent"]["run"].update(runId="x"), "run.facets.parent.run.runId"),
        (lambda o: o["run"]["facets"]["parent"]["job"].pop("name"), "run.facets.parent.job.name"),
        (lambda o: o["run"]["facets"]["parent"]["run"].update(runId=P1), "run.facets.parent.run.runId"),
        (lambda o: o["run"]["facets"].update(custom=[1]), "run.facets.custom"),
        (lambda o: o.update(inputs=[{"namespace": "s3://lake"}]), "inputs[0].name"),
    ],
)
def test_each_invalid_event_names_its_field(change, field):
    with pytest.raises(InvalidRunEvent) as caught:
        parse_run_event(_broken(change))
    assert caught.value.field == field


def test_not_an_object_is_invalid():
    with pytest.raises(InvalidRunEvent) as caught:
        parse_run_event(["not", "an", "event"])
    assert caught.value.field == "event"


# -- naming -----------------------------------------------------------------------------------

def test_child_job_is_qualified_by_its_parent():
    state = fold([record(S, RunState.START, 0, SCHEDULE),
                  record(P1, RunState.START, 1, "hourly_metrics", parent=(S, NS, SCHEDULE))])
    child = state.jobs[(NS, f"{SCHEDULE}.hourly_metrics")]
    assert (child.simple_name, child.parent_job_name) == ("hourly_metrics", SCHEDULE)
    assert state.jobs[(NS, SCHEDULE)].parent_job_name is None
    assert state.runs[P1].job_name == f"{SCHEDULE}.hourly_metrics" and state.runs[P1].parent_run_id == S


def test_a_name_the_producer_already_qualified_is_not_qualified_twice():
    state = fold([record(S, RunState.START, 0, SCHEDULE),
                  record(P1, RunState.START, 1, f"{SCHEDULE}.hourly_metrics", parent=(S, NS, SCHEDULE))])
    assert set(state.jobs) == {(NS, SCHEDULE), (NS, f"{SCHEDULE}.hourly_metrics")}
    assert state.jobs[(NS, f"{SCHEDULE}.hourly_metrics")].simple_name == "hourly_metrics"


def test_the_same_simple_job_under_two_parents_is_two_jobs():
    other = "0195499e-1a00-7000-8000-0000000000ff"
    state = fold([record(P1, RunState.START, 1, "compact", parent=(S, NS, "daily")),
                  record(P2, RunState.START, 1, "compact", parent=(other, NS, "hourly"))])
    assert {(NS, "daily.compact"), (NS, "hourly.compact")} <= set(state.jobs)


def test_grandchild_is_qualified_through_the_whole_chain_and_parent_namespace_is_kept():
    state = fold([
        record(SPARK, RunState.START, 5, "hourly_metrics.aggregate", namespace="spark",
               parent=(P1, NS, "hourly_metrics")),
        record(P1, RunState.START, 1, "hourly_metrics", parent=(S, "schedules", SCHEDULE)),
    ])
    spark = state.jobs[("spark", f"{SCHEDULE}.hourly_metrics.aggregate")]
    assert (spark.simple_name, spark.parent_job_namespace) == ("aggregate", NS)
    assert state.jobs[("schedules", SCHEDULE)].parent_job_name is None      # placeholder, from the facet


def test_a_parent_seen_only_through_its_child_is_a_placeholder_filled_in_later():
    child = record(P1, RunState.START, 10, "hourly_metrics", parent=(S, NS, SCHEDULE))
    state = evolve(EMPTY, child)
    placeholder = state.runs[S]
    assert (placeholder.state, placeholder.last_event_time, placeholder.started_at) == (UNKNOWN, None, None)
    assert placeholder.job_name == SCHEDULE and placeholder.parent_run_id is None

    state = evolve(state, record(S, RunState.START, 0, SCHEDULE))
    state = evolve(state, record(S, RunState.COMPLETE, 60, SCHEDULE))
    assert (state.runs[S].state, state.runs[S].started_at, state.runs[S].ended_at) == (
        "COMPLETE", T0, T0 + timedelta(seconds=60))
    assert set(state.jobs) == {(NS, SCHEDULE), (NS, f"{SCHEDULE}.hourly_metrics")}


def test_a_later_event_without_parent_facet_keeps_the_parent():
    state = fold([record(P1, RunState.START, 1, "hourly_metrics", parent=(S, NS, SCHEDULE)),
                  record(P1, RunState.COMPLETE, 9, "hourly_metrics")])
    assert state.runs[P1].parent_run_id == S and state.runs[P1].job_name == f"{SCHEDULE}.hourly_metrics"


def test_the_same_event_twice_changes_nothing():
    r = record(P1, RunState.START, 1, "hourly_metrics", parent=(S, NS, SCHEDULE), inputs=["raw"])
    once = evolve(EMPTY, r)
    assert evolve(once, r) is once
    assert once.has_seen(r) and not EMPTY.has_seen(r)


def test_terminal_state_wins_over_a_later_running_event():
    state = fold([record(P1, RunState.START, 0, "j"), record(P1, RunState.COMPLETE, 10, "j"),
                  record(P1, RunState.RUNNING, 20, "j")])
    assert (state.runs[P1].state, state.runs[P1].ended_at) == ("COMPLETE", T0 + timedelta(seconds=10))


# -- order independence -----------------------------------------------------------------------

def _history():
    """A schedule run with three child program runs (P3 fails), a Spark grandchild whose
    producer already qualified its name, and a late OTHER event on P1 lacking the parent facet."""
    sched = (S, NS, SCHEDULE)
    late = ol_event(P1, RunState.OTHER, 900, "hourly_metrics", outputs=["metrics/hourly_audit"])
    del late["eventType"]
    return [
        record(S, RunState.START, 0, SCHEDULE),
        record(P1, RunState.START, 5, "hourly_metrics", parent=sched, inputs=["raw/clicks"]),
        record(P2, RunState.START, 6, "hourly_metrics", parent=sched, inputs=["raw/clicks"]),
        record(P3, RunState.START, 7, "hourly_metrics", parent=sched, inputs=["raw/clicks"]),
        record(SPARK, RunState.START, 8, "hourly_metrics.aggregate", parent=(P1, NS, "hourly_metrics")),
        record(P1, RunState.COMPLETE, 100, "hourly_metrics", parent=sched, outputs=["metrics/hourly"]),
        record(P2, RunState.COMPLETE, 120, "hourly_metrics", parent=sched, outputs=["metrics/hourly"]),
        record(P3, RunState.FAIL, 130, "hourly_metrics", parent=sched),
        record(S, RunState.COMPLETE, 200, SCHEDULE),
        parse_run_event(late),
    ]


HISTORY = _history()
EXPECTED = reduce(evolve, HISTORY, EMPTY)


def test_the_history_folds_to_the_expected_hierarchy():
    child = f"{SCHEDULE}.hourly_metrics"
    assert {name for _, name in EXPECTED.jobs} == {SCHEDULE, child, f"{child}.aggregate"}
    runs = EXPECTED.runs
    assert [runs[r].state for r in (S, P1, P2, P3, SPARK)] == ["COMPLETE", "COMPLETE", "COMPLETE", "FAIL", "START"]
    assert {runs[r].parent_run_id for r in (P1, P2, P3)} == {S}
    assert runs[P1].outputs == (dataset_key("s3://lake", "metrics/hourly"), dataset_key("s3://lake", "metrics/hourly_audit"))
    assert runs[P1].inputs == (dataset_key("s3://lake", "raw/clicks"),)
    assert (runs[S].started_at, runs[S].ended_at) == (T0, T0 + timedelta(seconds=200))
    assert runs[P3].ended_at == T0 + timedelta(seconds=130)
    assert runs[P1].last_event_time == T0 + timedelta(seconds=900)


@settings(max_examples=300, deadline=None, database=None)
@given(order=st.permutations(range(len(HISTORY))), repeats=st.lists(st.integers(0, len(HISTORY) - 1), max_size=4))
def test_every_arrival_order_with_redeliveries_gives_the_same_state(order, repeats):
    events = [HISTORY[i] for i in order] + [HISTORY[i] for i in repeats]
    state = reduce(evolve, events, EMPTY)
    assert state == EXPECTED
    assert (state.jobs, state.runs) == (EXPECTED.jobs, EXPECTED.runs)
    assert render_tree(state) == render_tree(EXPECTED)
    assert_indexes_match_a_recomputation(state)


def test_every_permutation_of_the_tricky_events_gives_the_same_state():
    tricky = [HISTORY[i] for i in (0, 1, 4, 5, 7, 8, 9)]      # 7! = 5040 orders
    expected = fold(tricky)
    for order in itertools.permutations(tricky):
        state = fold(order)
        assert (state.jobs, state.runs) == (expected.jobs, expected.runs), order
        assert_indexes_match_a_recomputation(state)


def test_ties_at_the_same_event_time_are_broken_deterministically():
    complete, fail = record(P1, RunState.COMPLETE, 10, "j"), record(P1, RunState.FAIL, 10, "j")
    assert fold([complete, fail]).runs[P1].state == fold([fail, complete]).runs[P1].state == "FAIL"


INDEXES = ("job_of_run", "runs_of_job", "children", "jobs", "inputs_of_job", "outputs_of_job", "readers", "writers",
           "latest", "_namings", "_shared")  # the last two: what later events update after a restart


def assert_indexes_match_a_recomputation(state):
    """What was maintained event by event equals what the facts give from scratch."""
    maintained = state._index
    recomputed = LineageIndex.from_facts(maintained.facts.values())
    for name in INDEXES:
        assert getattr(maintained, name) == getattr(recomputed, name), name


def test_a_parent_that_changes_requalifies_every_descendant():
    other = "0195499e-1a00-7000-8000-0000000000ff"
    before = fold([record(S, RunState.START, 0, SCHEDULE),
                   record(P1, RunState.START, 1, "hourly_metrics", parent=(S, NS, SCHEDULE), outputs=["m/h"]),
                   record(SPARK, RunState.START, 2, "aggregate", parent=(P1, NS, "hourly_metrics"), inputs=["raw"])])
    assert before.runs[SPARK].job_name == f"{SCHEDULE}.hourly_metrics.aggregate"
    later = evolve(before, record(P1, RunState.COMPLETE, 9, "hourly_metrics", parent=(other, NS, "backfill")))
    assert later.runs[P1].job_name == "backfill.hourly_metrics" and later.runs[P1].parent_run_id == other
    assert later.runs[SPARK].job_name == "backfill.hourly_metrics.aggregate"
    assert (NS, f"{SCHEDULE}.hourly_metrics.aggregate") not in later.jobs and (NS, SCHEDULE) in later.jobs
    assert later.datasets_of((NS, "backfill.hourly_metrics.aggregate")) == ((dataset_key("s3://lake", "raw"),), ())
    assert later.jobs_of(dataset_key("s3://lake", "m/h")) == ((), ((NS, "backfill.hourly_metrics"),))
    assert [r.run_id for r in later.children_of(other)] == [P1] and not later.children_of(S)
    assert_indexes_match_a_recomputation(later)


def test_a_cycle_that_forms_and_breaks_again_leaves_the_indexes_consistent():
    a = record(P1, RunState.START, 1, "a", parent=(P2, NS, "b"))
    b = record(P2, RunState.START, 2, "b", parent=(P1, NS, "a"))
    c = record(P3, RunState.START, 3, "c", parent=(P2, NS, "b"))
    b_rooted = record(P2, RunState.COMPLETE, 9, "b", parent=(S, NS, SCHEDULE))
    for order in itertools.permutations([a, b, c, b_rooted]):
        state = fold(order)
        assert state.runs[P3].job_name == f"{SCHEDULE}.b.c"
        assert_indexes_match_a_recomputation(state)


def test_a_state_that_was_evolved_cannot_be_read_but_an_equal_state_can_be_rebuilt():
    first = evolve(EMPTY, HISTORY[0])
    second = evolve(first, HISTORY[1])
    with pytest.raises(StaleLineageState):
        first.runs
    with pytest.raises(StaleLineageState):
        evolve(first, HISTORY[2])
    assert second == fold(HISTORY[:2]) and not EMPTY.runs


# -- rendering --------------------------------------------------------------------------------

def test_render_tree_shows_the_hierarchy_with_runs():
    text = render_tree(EXPECTED)
    lines = text.splitlines()
    assert lines[0] == f"{SCHEDULE}  [1 run: 1 COMPLETE]"
    assert f"  └─ {SCHEDULE}.hourly_metrics  [3 runs: 2 COMPLETE, 1 FAIL]" in lines
    assert f"       └─ {SCHEDULE}.hourly_metrics.aggregate  [1 run: 1 START]" in lines
    assert any(line.strip().startswith("· run ..00000013  FAIL") and line.endswith("2m03s") for line in lines)
    assert render_tree(EXPECTED, namespace="elsewhere") == "(no lineage in namespace elsewhere)"
    assert render_tree(EMPTY) == "(no lineage)"


def test_a_parent_cycle_terminates_and_does_not_depend_on_order():
    a = record(P1, RunState.START, 1, "a", parent=(P2, NS, "b"))
    b = record(P2, RunState.START, 2, "b", parent=(P1, NS, "a"))
    assert (fold([a, b]).jobs, fold([a, b]).runs) == (fold([b, a]).jobs, fold([b, a]).runs)
    assert len(fold([a, b]).runs) == 2
