"""The clickstream generator: determinism, partition layout, local time zones, a sane funnel."""
from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from sluice_examples.clickstream.generate import (
    CURRENCIES,
    MARKETPLACES,
    assignment,
    generate_hour,
    hours_for,
    main,
    partition_key,
)


def local(marketplace: str, day: str, hour: int) -> datetime:
    (start,) = hours_for(marketplace, day, [hour])
    return start


def events_of(partition: dict) -> list[dict]:
    (path,) = Path(partition["location"]).glob("*.json")
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    hour = local("US", "2026-11-22", 9)
    a = generate_hour(tmp_path / "a", "experiments", "US", hour, rows=500, seed=7)
    b = generate_hour(tmp_path / "b", "experiments", "US", hour, rows=500, seed=7)
    c = generate_hour(tmp_path / "c", "experiments", "US", hour, rows=500, seed=8)
    read = lambda p: (Path(p["location"]) / "part-00000.json").read_bytes()  # noqa: E731
    assert read(a) == read(b) != read(c)
    assert {k: v for k, v in a.items() if k != "location"} == {k: v for k, v in b.items() if k != "location"}


def test_partition_layout_and_returned_partition(tmp_path):
    p = generate_hour(tmp_path, "experiments", "UK", local("UK", "2026-11-22", 9), rows=300, seed=1)
    expected_dir = tmp_path.resolve() / "experiments/clickstream/marketplace=UK/date=2026-11-22/hour=09"
    assert p["key"] == {"marketplace": "UK", "date": "2026-11-22", "hour": "09"}
    assert list(p["key"]) == ["marketplace", "date", "hour"]
    assert p["location"] == str(expected_dir)
    assert [f.name for f in expected_dir.iterdir()] == ["part-00000.json"]
    assert p["size_bytes"] == (expected_dir / "part-00000.json").stat().st_size
    assert p["record_count"] == len(events_of(p)) == 300
    assert p["metadata"]["time_zone"] == "Europe/London"
    assert all(isinstance(v, str) for v in p["metadata"].values())   # a map<string, string> on the bus
    json.dumps(p)


def test_regenerating_a_partition_replaces_it(tmp_path):
    hour = local("JP", "2026-11-22", 9)
    generate_hour(tmp_path, "experiments", "JP", hour, rows=400, seed=1)
    p = generate_hour(tmp_path, "experiments", "JP", hour, rows=50, seed=1)
    assert [f.name for f in Path(p["location"]).iterdir()] == ["part-00000.json"]
    assert len(events_of(p)) == 50


@pytest.mark.parametrize("marketplace, utc_start, offset", [
    ("JP", datetime(2026, 11, 22, 0, tzinfo=timezone.utc), "+09:00"),
    ("UK", datetime(2026, 11, 22, 9, tzinfo=timezone.utc), "+00:00"),
    ("US", datetime(2026, 11, 22, 14, tzinfo=timezone.utc), "-05:00"),
])
def test_hour_09_is_local_to_each_marketplace(tmp_path, marketplace, utc_start, offset):
    p = generate_hour(tmp_path, "experiments", marketplace, local(marketplace, "2026-11-22", 9), rows=400, seed=3)
    assert p["key"]["hour"] == "09" and p["key"]["date"] == "2026-11-22"
    assert p["metadata"]["start_utc"] == utc_start.isoformat()
    times = [datetime.fromisoformat(e["event_time"]) for e in events_of(p)]
    assert all(e["event_time"].endswith(offset) for e in events_of(p))
    assert all(utc_start <= t < utc_start + timedelta(hours=1) for t in times)
    assert times == sorted(times)


def test_jp_morning_is_the_previous_utc_evening(tmp_path):
    p = generate_hour(tmp_path, "experiments", "JP", local("JP", "2026-11-22", 8), rows=50, seed=3)
    assert p["key"] == {"marketplace": "JP", "date": "2026-11-22", "hour": "08"}
    assert p["metadata"]["start_utc"] == "2026-11-21T23:00:00+00:00"


def test_a_local_hour_given_in_another_zone_is_converted(tmp_path):
    utc_midnight = datetime(2026, 11, 22, 0, tzinfo=timezone.utc)
    assert partition_key("JP", utc_midnight) == {"marketplace": "JP", "date": "2026-11-22", "hour": "09"}
    assert partition_key("US", utc_midnight) == {"marketplace": "US", "date": "2026-11-21", "hour": "19"}


def test_funnel_and_event_fields_are_sane(tmp_path):
    events = []
    for m in MARKETPLACES:
        events += events_of(generate_hour(tmp_path, "experiments", m, local(m, "2026-11-22", 20), rows=2000, seed=11))
    counts = Counter(e["event_type"] for e in events)
    assert set(counts) == {"view", "click", "add_to_cart", "purchase"}
    assert counts["view"] > counts["click"] > counts["add_to_cart"] > counts["purchase"] > 0
    assert 0.15 < counts["click"] / counts["view"] < 0.45
    assert 0.005 < counts["purchase"] / counts["view"] < 0.06
    for e in events:
        assert (e["revenue"] is not None) == (e["event_type"] == "purchase")
        assert e["currency"] == CURRENCIES[e["marketplace"]]
        assert (e["experiment_id"], e["bucket"]) == assignment(e["user_id"])
        assert e["latency_ms"] >= 5 and isinstance(e["latency_ms"], int)
    assert {e["bucket"] for e in events} == {"A", "B"}
    assert len({e["experiment_id"] for e in events}) == 2
    assert all(r > 0 for r in (e["revenue"] for e in events if e["revenue"] is not None))
    latencies = sorted(e["latency_ms"] for e in events)
    assert latencies[len(latencies) // 2] < latencies[int(len(latencies) * 0.95)] < 5 * latencies[len(latencies) // 2]


def test_funnel_holds_within_every_session_even_when_the_partition_cuts_one_short(tmp_path):
    p = generate_hour(tmp_path, "experiments", "US", local("US", "2026-11-22", 12), rows=1001, seed=5)
    by_session: dict[str, Counter] = {}
    for e in events_of(p):
        by_session.setdefault(e["session_id"], Counter())[e["event_type"]] += 1
    for c in by_session.values():
        assert c["view"] >= c["click"] >= c["add_to_cart"] >= c["purchase"]
    assert len({e["user_id"] for e in events_of(p)}) < len(by_session)   # users come back


def test_zero_rows_writes_an_empty_partition(tmp_path):
    p = generate_hour(tmp_path, "experiments", "US", local("US", "2026-11-22", 9), rows=0, seed=1)
    assert (p["record_count"], p["size_bytes"]) == (0, 0)


@pytest.mark.parametrize("bad, message", [
    (datetime(2026, 11, 22, 9), "timezone-aware"),
    (datetime(2026, 11, 22, 9, 30, tzinfo=ZoneInfo("America/New_York")), "must start an hour"),
])
def test_rejects_naive_or_unaligned_hours(tmp_path, bad, message):
    with pytest.raises(ValueError, match=message):
        generate_hour(tmp_path, "experiments", "US", bad, rows=1, seed=1)


def test_rejects_unknown_marketplace(tmp_path):
    with pytest.raises(ValueError, match="unknown marketplace 'DE'"):
        hours_for("DE", "2026-11-22")


def test_hours_for_skips_the_spring_forward_gap_and_keeps_one_repeated_hour():
    assert len(hours_for("US", "2026-11-22")) == 24
    spring = hours_for("US", "2026-03-08")   # 02:00 does not exist in New York that day
    assert [h.hour for h in spring] == [h for h in range(24) if h != 2]
    autumn = hours_for("UK", "2026-10-25", [0, 1, 2])   # 01:00 happens twice in London
    assert [h.isoformat() for h in autumn] == [
        "2026-10-25T00:00:00+01:00", "2026-10-25T01:00:00+01:00", "2026-10-25T02:00:00+00:00"]


def test_the_repeated_hour_stays_inside_one_real_hour(tmp_path):
    (first_one_am,) = hours_for("UK", "2026-10-25", [1])
    p = generate_hour(tmp_path, "experiments", "UK", first_one_am, rows=300, seed=2)
    times = [datetime.fromisoformat(e["event_time"]) for e in events_of(p)]
    start = datetime(2026, 10, 25, 0, tzinfo=timezone.utc)
    assert all(start <= t < start + timedelta(hours=1) for t in times)


def test_cli_prints_one_partition_per_hour(tmp_path, capsys):
    assert main(["--data-dir", str(tmp_path), "--marketplace", "JP", "--date", "2026-11-22",
                 "--hour", "9", "10", "--rows", "40"]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [p["key"]["hour"] for p in printed] == ["09", "10"]
    assert all(p["record_count"] == 40 for p in printed)


def test_cli_reports_a_missing_local_hour(tmp_path, capsys):
    assert main(["--data-dir", str(tmp_path), "--marketplace", "US", "--date", "2026-03-08",
                 "--hour", "2", "--rows", "5"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and "skipped hour 02" in captured.err
