"""The metrics registry on prometheus_client: one registry per service, merged into the process's
exposition family by family with a `service` label; process metrics; collectors read at scrape
time; the exposition parses with prometheus_client's own parser."""
from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sluice.runtime.metrics import SERVICE_LABEL, Registry
from sluice.runtime.metrics_scheduler import Reading, count_by


def families(registry: Registry) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    """family name -> [(sample name, labels, value)], parsed as Prometheus would."""
    return {family.name: [(s.name, s.labels, s.value) for s in family.samples]
            for family in text_string_to_metric_families(registry.render())}


def test_services_report_one_family_each_labelled_by_service():
    registry = Registry()
    for service, topic in (("checker", "sluice.jobs"), ("launcher", "sluice.launch-requests")):
        handled = registry.service(service).counter("sluice_consumer_messages_total", "Handled.", ("topic",))
        handled.labels(topic).inc(2 if service == "launcher" else 1)
    text = registry.render()
    assert text.count("# TYPE sluice_consumer_messages_total counter") == 1
    assert families(registry)["sluice_consumer_messages"] == [
        ("sluice_consumer_messages_total", {"topic": "sluice.jobs", SERVICE_LABEL: "checker"}, 1.0),
        ("sluice_consumer_messages_total", {"topic": "sluice.launch-requests", SERVICE_LABEL: "launcher"}, 2.0)]


def test_the_process_registry_has_process_metrics_and_its_own_families_unlabelled():
    registry = Registry()
    registry.counter("sluice_grpc_server_handled_total", "Handled.", ("grpc_code",)).labels("OK").inc()
    found = families(registry)
    assert found["sluice_grpc_server_handled"] == [("sluice_grpc_server_handled_total", {"grpc_code": "OK"}, 1.0)]
    assert {"process_cpu_seconds", "process_resident_memory_bytes", "python_gc_collections"} <= set(found)
    assert "process_cpu_seconds" not in families(registry.service("checker"))
    assert "_created" not in registry.render()


def test_asking_twice_gives_the_same_metric_and_a_different_shape_is_refused():
    service = Registry().service("checker")
    first = service.counter("sluice_shared_total", "Shared.", ("topic",))
    assert service.counter("sluice_shared_total", "Shared.", ("topic",)) is first
    assert Registry().service("checker") is not Registry().service("checker")
    with pytest.raises(ValueError, match="registered already"):
        service.gauge("sluice_shared_total", "Shared.", ("topic",))
    with pytest.raises(ValueError, match="registered already"):
        service.counter("sluice_shared_total", "Shared.", ("group",))
    with pytest.raises(ValueError, match="adds itself"):
        service.gauge("sluice_other", "Other.", (SERVICE_LABEL,))
    with pytest.raises(ValueError):
        service.service("nested")


def test_histograms_have_cumulative_buckets_sum_and_count():
    seconds = Registry().service("launcher")
    histogram = seconds.histogram("sluice_run_duration_seconds", "Durations.", ("status",), buckets=(1.0, 10.0))
    for value in (0.5, 5.0, 50.0):
        histogram.labels("COMPLETED").observe(value)
    samples = {(name, labels.get("le")): value for name, labels, value in families(seconds)["sluice_run_duration_seconds"]}
    assert samples[("sluice_run_duration_seconds_bucket", "1.0")] == 1
    assert samples[("sluice_run_duration_seconds_bucket", "10.0")] == 2
    assert samples[("sluice_run_duration_seconds_bucket", "+Inf")] == 3
    assert samples[("sluice_run_duration_seconds_count", None)] == 3
    assert samples[("sluice_run_duration_seconds_sum", None)] == 55.5


def test_readings_are_taken_at_scrape_time_and_several_merge_into_one_family():
    registry, state = Registry(), {"jobs": ["LAUNCHED", "PENDING_CONSTRAINT", "LAUNCHED"]}
    checker = registry.service("checker")
    checker.register(Reading("sluice_jobs", "Jobs by state.", ("state",),
                             lambda: count_by(state["jobs"], ("DISCARDED",))))
    assert sorted((labels["state"], value) for _, labels, value in families(registry)["sluice_jobs"]) == [
        ("DISCARDED", 0.0), ("LAUNCHED", 2.0), ("PENDING_CONSTRAINT", 1.0)]
    state["jobs"] = []
    assert {value for _, _, value in families(registry)["sluice_jobs"]} == {0.0}

    for partition in ("0", "1"):
        checker.register(Reading("sluice_consumer_lag_records", "Lag.", ("partition",),
                                 lambda p=partition: {(p,): float(p)}))
    assert registry.render().count("# TYPE sluice_consumer_lag_records gauge") == 1
    assert sorted(v for _, _, v in families(registry)["sluice_consumer_lag_records"]) == [0.0, 1.0]


def test_a_reading_that_fails_gives_no_samples_and_the_scrape_goes_on(caplog):
    registry = Registry()

    def broken() -> dict:
        raise OSError("the log is unreachable")

    registry.service("checker").register(Reading("sluice_checker_queue_depth", "Depth.", (), broken))
    registry.counter("sluice_ok_total", "Fine.").inc()
    found = families(registry)
    assert "sluice_checker_queue_depth" not in found or found["sluice_checker_queue_depth"] == []
    assert found["sluice_ok"] == [("sluice_ok_total", {}, 1.0)]
    assert "the log is unreachable" in caplog.text


def test_label_values_are_escaped_as_the_format_requires():
    registry = Registry()
    registry.counter("sluice_odd_total", "Back\\slash and\nnewline.", ("value",)).labels('a "quoted" \\ path\nnext').inc()
    assert families(registry)["sluice_odd"] == [("sluice_odd_total", {"value": 'a "quoted" \\ path\nnext'}, 1.0)]
