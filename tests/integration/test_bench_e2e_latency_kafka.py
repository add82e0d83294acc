"""e2e-latency's distributed mode end to end, tiny: the registry, matcher and checker as `sluice serve`
processes on a real Kafka broker and PostgreSQL (bench/e2e_latency.py)."""
from __future__ import annotations

import json

import pytest

from bench.__main__ import main

pytestmark = pytest.mark.bench  # runs a benchmark: `make test` keeps it, `make test-fast` leaves it out

@pytest.mark.slow
@pytest.mark.integration
def test_distributed_mode_runs_the_services_as_processes_and_prints_its_figures(capsys):
    assert main(["e2e-latency", "--runs", "1", "--schedules", "20", "--notifications", "50",
                 "--rates", "100", "--bus", "kafka", "--warm-up", "0"]) == 0
    captured = capsys.readouterr()
    lines = [json.loads(line) for line in captured.out.splitlines()]
    assert {line["metric"] for line in lines} == {"kafka_latency_p50@100/s", "kafka_latency_p99@100/s",
                                                 "kafka_throughput@100/s", "kafka_cpu_per_notification@100/s",
                                                 "kafka_p99_ratio_to_floor@100/s"}
    assert all(line["value"] > 0 for line in lines)
    assert "registry pid" in captured.err and "matcher process" in captured.err
