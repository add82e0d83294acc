"""The replay, append and checker benchmarks run at a tiny size and print well-formed figures."""
from __future__ import annotations

import pytest

import bench.replay
from tests.unit.test_bench_smoke import figures

pytestmark = pytest.mark.bench  # runs a benchmark: `make test` keeps it, `make test-fast` leaves it out


def test_replay_prints_its_figures(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("BENCH_EVENTS", "3000")
    monkeypatch.setattr(bench.replay.tempfile, "gettempdir", lambda: str(tmp_path))
    lines = figures(capsys, ["replay", "--runs", "2"])  # the second run reuses the generated log
    assert {line["metric"] for line in lines} == {
        "replay_events_per_s", "replay_decoded_events_per_s",
        "restart_to_ready_with_snapshots_s", "restart_to_ready_without_snapshots_s"}
    assert [path.name for path in tmp_path.iterdir()] == ["sluice-bench-replay-v2-3000.db"]


@pytest.mark.integration  # starts a PostgreSQL server
def test_append_prints_its_figures(capsys, monkeypatch):
    monkeypatch.setenv("BENCH_APPENDS", "20")
    monkeypatch.setenv("BENCH_BATCHES", "5")
    lines = figures(capsys, ["append", "--runs", "1"])
    assert {line["metric"] for line in lines} == {
        "sqlite_single_appends_per_s", "sqlite_batched_events_per_s",
        "postgres_single_appends_per_s", "postgres_batched_events_per_s"}


def test_checker_prints_its_figures(capsys, monkeypatch):
    monkeypatch.setenv("BENCH_WAITING", "300")
    monkeypatch.setenv("BENCH_ARRIVALS", "40")
    lines = figures(capsys, ["checker", "--runs", "1"])
    assert {line["metric"] for line in lines} == {"decision_ms_p50", "decision_ms_p99", "run_end_ms_p50", "run_end_ms_p99",
                                                  "queued_per_s"}
