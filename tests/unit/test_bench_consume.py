"""The consume benchmark runs, tiny, and prints its three figures (bench/consume.py)."""
from __future__ import annotations

import json

import pytest

from bench.__main__ import main

pytestmark = pytest.mark.bench  # runs a benchmark: `make test` keeps it, `make test-fast` leaves it out


def test_consume_prints_its_figures(capsys, monkeypatch):
    monkeypatch.setenv("BENCH_PARTITIONS", "3000")
    monkeypatch.setenv("BENCH_NEW_PARTITIONS", "20")
    assert main(["consume", "--runs", "1"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["metric"] for line in lines] == [
        "consume_new_on_empty_ms", "consume_new_on_large_ms", "large_to_empty_ratio"]
    assert all(line["bench"] == "consume" and line["value"] > 0 for line in lines)
    assert lines[2]["target"] == 1.5 and lines[2]["unit"] == "x"
