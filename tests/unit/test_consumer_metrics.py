"""The consumer's handling-time histogram: a batch's records are observed at once, as one by one would."""
from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Histogram

from sluice.runtime.consumer import ConsumerMetrics, _observe_times
from sluice.runtime.metrics import Registry


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for metric in registry.collect() for s in metric.samples if not s.name.endswith("_created")}


@pytest.mark.parametrize("seconds, count", [(0.0, 7), (0.0004, 5), (0.03, 3), (1e9, 2), (0.25, 1)])
def test_observing_a_batch_at_once_equals_observing_each_record(seconds: float, count: int) -> None:
    at_once, each = CollectorRegistry(), CollectorRegistry()
    _observe_times(Histogram("h", "h", ("g",), registry=at_once).labels("x"), seconds, count)
    one_by_one = Histogram("h", "h", ("g",), registry=each).labels("x")
    for _ in range(count):
        one_by_one.observe(seconds)
    assert _samples(at_once) == pytest.approx(_samples(each))


def test_a_recorded_batch_counts_every_record_in_the_histogram() -> None:
    metrics = ConsumerMetrics(Registry())
    metrics.record("topic", "group", 0.002, None, count=4)
    metrics.record("topic", "group", 0.5, None)
    collected = {(s.name, s.labels.get("le")): s.value for s in next(iter(metrics.seconds.collect())).samples
                 if s.labels.get("topic") == "topic"}
    assert collected[("sluice_consumer_handling_seconds_count", None)] == 5
    assert collected[("sluice_consumer_handling_seconds_sum", None)] == pytest.approx(0.508)
    assert collected[("sluice_consumer_handling_seconds_bucket", "+Inf")] == 5
