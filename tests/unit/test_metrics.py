"""The metrics registry renders the Prometheus text exposition format 0.0.4."""
from __future__ import annotations

import math

import pytest

from sluice.runtime.metrics import Registry, escape_label_value, format_value


def lines(registry: Registry) -> list[str]:
    text = registry.render()
    assert text.endswith("\n")
    return text.splitlines()


def test_counter_with_labels_has_help_type_and_one_sample_per_label_set():
    registry = Registry()
    handled = registry.counter("sluice_requests_total", "Requests handled.", ("method", "code"))
    handled.labels(method="List", code="OK").inc()
    handled.labels("List", "OK").inc(2)
    handled.labels(method="Get", code="NOT_FOUND").inc()
    assert lines(registry) == [
        "# HELP sluice_requests_total Requests handled.",
        "# TYPE sluice_requests_total counter",
        'sluice_requests_total{method="Get",code="NOT_FOUND"} 1',
        'sluice_requests_total{method="List",code="OK"} 3',
    ]


def test_counter_without_labels_and_counters_only_go_up():
    registry = Registry()
    total = registry.counter("events_total", "Events.")
    total.inc(0.5)
    assert lines(registry)[-1] == "events_total 0.5"
    with pytest.raises(ValueError):
        total.inc(-1)


def test_gauge_sets_increments_and_decrements():
    registry = Registry()
    position = registry.gauge("relay_position", "Position.", ("relay",))
    position.labels("registry").set(41)
    position.labels("registry").inc()
    position.labels("matcher").set(7)
    position.labels("matcher").dec(2.5)
    assert lines(registry) == [
        "# HELP relay_position Position.",
        "# TYPE relay_position gauge",
        'relay_position{relay="matcher"} 4.5',
        'relay_position{relay="registry"} 42',
    ]


def test_histogram_buckets_are_cumulative_with_inf_sum_and_count():
    registry = Registry()
    seconds = registry.histogram("handling_seconds", "Handling time.", ("topic",), buckets=(0.5, 2.0, 0.25))
    child = seconds.labels(topic="jobs")
    for value in (0.125, 0.25, 1.5, 1.5, 4.0):
        child.observe(value)
    assert lines(registry) == [
        "# HELP handling_seconds Handling time.",
        "# TYPE handling_seconds histogram",
        'handling_seconds_bucket{topic="jobs",le="0.25"} 2',   # le is inclusive: 0.25 counts
        'handling_seconds_bucket{topic="jobs",le="0.5"} 2',
        'handling_seconds_bucket{topic="jobs",le="2.0"} 4',
        'handling_seconds_bucket{topic="jobs",le="+Inf"} 5',
        'handling_seconds_sum{topic="jobs"} 7.375',
        'handling_seconds_count{topic="jobs"} 5',
    ]


def test_histogram_default_buckets_run_from_a_millisecond_to_ten_seconds():
    registry = Registry()
    registry.histogram("latency_seconds", "Latency.").observe(0.2)
    buckets = [line for line in lines(registry) if "_bucket" in line]
    assert buckets[0] == 'latency_seconds_bucket{le="0.001"} 0'
    assert buckets[-2] == 'latency_seconds_bucket{le="10.0"} 1'
    assert buckets[-1] == 'latency_seconds_bucket{le="+Inf"} 1'


def test_label_values_and_help_are_escaped():
    registry = Registry()
    registry.counter("odd_total", "Back\\slash and\nnewline.", ("value",)).labels('a "quoted" \\ path\nnext').inc()
    assert lines(registry) == [
        "# HELP odd_total Back\\\\slash and\\nnewline.",
        "# TYPE odd_total counter",
        'odd_total{value="a \\"quoted\\" \\\\ path\\nnext"} 1',
    ]
    assert escape_label_value("plain") == "plain"


def test_label_sets_without_observations_render_at_zero():
    registry = Registry()
    registry.counter("dead_total", "Dead.", ("reason",)).labels("malformed")
    registry.gauge("empty", "No series yet.", ("relay",))
    assert 'dead_total{reason="malformed"} 0' in lines(registry)
    assert lines(registry)[-2:] == ["# HELP empty No series yet.", "# TYPE empty gauge"]


def test_asking_again_returns_the_same_metric_and_a_clash_is_refused():
    registry = Registry()
    first = registry.counter("shared_total", "Shared.", ("topic",))
    assert registry.counter("shared_total", "Shared.", ("topic",)) is first
    with pytest.raises(ValueError):
        registry.gauge("shared_total", "Shared.", ("topic",))
    with pytest.raises(ValueError):
        registry.counter("shared_total", "Shared.", ("group",))


def test_metrics_render_sorted_by_name():
    registry = Registry()
    registry.counter("b_total", "B.").inc()
    registry.counter("a_total", "A.").inc()
    assert [line for line in lines(registry) if not line.startswith("#")] == ["a_total 1", "b_total 1"]


@pytest.mark.parametrize("name, labels", [("1bad", ()), ("bad-name", ()), ("ok", ("bad-label",)), ("ok", ("__x",))])
def test_invalid_names_are_refused(name, labels):
    with pytest.raises(ValueError):
        Registry().counter(name, "Help.", labels)


def test_le_is_reserved_for_histograms_and_labels_must_match():
    registry = Registry()
    with pytest.raises(ValueError):
        registry.histogram("h_seconds", "H.", ("le",))
    counter = registry.counter("c_total", "C.", ("topic", "group"))
    with pytest.raises(ValueError):
        counter.labels("only-one")
    with pytest.raises(ValueError):
        counter.labels(topic="t", other="x")


def test_values_are_formatted_like_prometheus_expects():
    assert format_value(3.0) == "3"
    assert format_value(0.25) == "0.25"
    assert format_value(math.inf) == "+Inf"
    assert format_value(-math.inf) == "-Inf"
    assert format_value(math.nan) == "NaN"
