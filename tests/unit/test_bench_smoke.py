"""The benchmarks run, in-process and tiny, and print well-formed figures (bench/, `make bench`)."""
from __future__ import annotations

import json
import re

import pytest

from bench import BENCHMARKS
from bench.__main__ import main

pytestmark = pytest.mark.bench  # runs a benchmark: `make test` keeps it, `make test-fast` leaves it out

REQUIRED = {"bench", "metric", "value", "unit", "target"}


def figures(capsys, argv: list[str]) -> list[dict]:
    assert main(argv) == 0
    out = capsys.readouterr().out
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines, "no figures printed"
    for line in lines:
        assert set(line) == REQUIRED, line
        assert isinstance(line["metric"], str) and line["metric"]
        assert isinstance(line["unit"], str) and line["unit"]
        assert isinstance(line["value"], (int, float)) and line["value"] > 0, line
        assert line["target"] is None or isinstance(line["target"], (int, float))
    return lines


def test_matcher_prints_its_figures(capsys):
    lines = figures(capsys, ["matcher", "--runs", "1", "--schedules", "50", "--datasets", "10",
                             "--notifications", "200"])
    assert {line["bench"] for line in lines} == {"matcher"}
    assert {line["metric"] for line in lines} == {
        "notifications_per_s", "ratio_to_bound", "append_scaling", "match_requests_per_s", "memory_per_schedule",
        "memory_per_schedule_registered", "schedules_registered_per_s"}
    targets = {line["metric"]: line["target"] for line in lines}
    assert targets["ratio_to_bound"] == 0.5 and targets["append_scaling"] == 0.9


def test_e2e_latency_prints_its_figures(capsys, monkeypatch):
    said: list[str] = []
    monkeypatch.setattr("bench.e2e_latency.progress", said.append)
    lines = figures(capsys, ["e2e-latency", "--runs", "1", "--schedules", "5", "--notifications", "100",
                             "--rates", "500", "--bus", "file", "--warm-up", "0"])
    assert {line["bench"] for line in lines} == {"e2e-latency"}
    assert {line["metric"]: line["target"] for line in lines} == {
        "latency_p50@500/s": None, "latency_p99@500/s": 10.0, "throughput@500/s": 500,
        "cpu_per_notification@500/s": 0.3}
    split = [line for line in said if "the event loop's thread" in line]
    assert len(split) == 1, said
    loop_ms, others_ms, kernel = re.search(r"thread (\S+) ms, .* (\S+) ms; in the kernel (\d+)%", split[0]).groups()
    cpu_ms = lines[[line["metric"] for line in lines].index("cpu_per_notification@500/s")]["value"]
    assert 0 < float(loop_ms) <= cpu_ms + 0.01 and float(others_ms) >= 0 and 0 <= int(kernel) <= 100


def test_timers_prints_its_figures(capsys, monkeypatch):
    monkeypatch.setenv("BENCH_DAY_SCHEDULES", "30")
    lines = figures(capsys, ["timers", "--runs", "1", "--schedules", "40"])
    assert {line["metric"]: line["target"] for line in lines} == {
        "spread_at_the_minute": 1.0, "spread_cpu_at_the_minute": None, "ratio_to_apscheduler": 1.0,
        "cost_per_fire": None}


def test_runs_report_the_median_of_each_metric(capsys, monkeypatch):
    from bench import Figure, matcher

    values = iter([3.0, 1.0, 2.0])
    monkeypatch.setattr(matcher, "run", lambda options: [Figure("x", next(values), "u", None)])
    (line,) = figures(capsys, ["matcher", "--runs", "3"])
    assert line == {"bench": "matcher", "metric": "x", "value": 2.0, "unit": "u", "target": None}


def test_list_and_unknown_names(capsys):
    assert main(["--list"]) == 0
    assert [line.split("\t")[0] for line in capsys.readouterr().out.splitlines()] == list(BENCHMARKS)
    assert main(["no-such-bench"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
    with pytest.raises(SystemExit) as exit_:
        main(["--runs", "0"])
    assert exit_.value.code == 2


@pytest.mark.parametrize("seconds", ["-1", "soon", "nan"])
def test_a_warm_up_that_is_not_seconds_is_refused_in_one_line(capsys, seconds):
    with pytest.raises(SystemExit) as exit_:
        main(["e2e-latency", "--warm-up", seconds])
    assert exit_.value.code == 2 and "--warm-up: must be a number of seconds" in capsys.readouterr().err


def test_lineage_prints_its_figures(capsys, monkeypatch):
    for name, value in (("JOBS", "70"), ("RUNS", "700"), ("QUERIES", "20"), ("POSTS", "10")):
        monkeypatch.setenv(f"BENCH_LINEAGE_{name}", value)
    lines = figures(capsys, ["lineage", "--runs", "1"])
    assert {line["metric"] for line in lines} == {
        "rebuild_events_per_s", "restart_from_snapshot_s", "memory_per_run", "http_ingest_events_per_s",
        "service_ingest_events_per_s", "lineage_query_p50_ms", "lineage_query_p99_ms"}
