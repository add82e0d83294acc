"""kafka-floor runs its trivial services over a real broker and PostgreSQL and prints its figures."""
from __future__ import annotations

import pytest

from tests.unit.test_bench_smoke import figures

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.bench]


def test_prints_its_figures(capsys):
    lines = figures(capsys, ["kafka-floor", "--runs", "1", "--rates", "200", "--notifications", "100",
                             "--warm-up", "0"])
    assert {line["metric"] for line in lines} == {"latency_p50@200/s", "latency_p99@200/s"}
