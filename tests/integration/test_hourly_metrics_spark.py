"""The clickstream hourly_metrics program under the REAL spark-submit, driven by a context.json
exactly as the launcher writes it; then result.json, the staged manifest and the metric values."""
from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from sluice_examples.clickstream.app import HOURLY_METRICS_ENTRY_POINT
from sluice_examples.clickstream.generate import generate_hour, hours_for

pytestmark = [pytest.mark.slow, pytest.mark.integration]

SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"
SPARK_ARGS = ["--master", "local[1]", "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=1",
              "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1"]
UK_KEY = {"marketplace": "UK", "date": "2026-11-22", "hour": "09"}

# A hand-made UK hour: (experiment, bucket, user, session, event_type, latency_ms, revenue)
HAND_EVENTS = [
    ("exp-42", "A", "u1", "s1", "view", 100, None), ("exp-42", "A", "u1", "s1", "click", 200, None),
    ("exp-42", "A", "u1", "s1", "view", 300, None), ("exp-42", "A", "u1", "s1", "add_to_cart", 400, None),
    ("exp-42", "A", "u1", "s1", "purchase", 500, 20.5), ("exp-42", "A", "u2", "s2", "view", 100, None),
    ("exp-42", "A", "u2", "s2", "view", 100, None), ("exp-42", "A", "u1", "s3", "view", 50, None),
    ("exp-42", "A", "u1", "s3", "click", 60, None),
    ("exp-42", "B", "u3", "s4", "view", 120, None), ("exp-42", "B", "u3", "s4", "click", 80, None),
    ("exp-42", "B", "u3", "s4", "add_to_cart", 150, None), ("exp-42", "B", "u3", "s4", "purchase", 300, 10.25),
    ("exp-42", "B", "u4", "s5", "view", 90, None), ("exp-42", "B", "u4", "s5", "click", 70, None),
    ("exp-42", "B", "u4", "s5", "add_to_cart", 140, None), ("exp-42", "B", "u4", "s5", "purchase", 310, 5.0),
    ("exp-57", "A", "u5", "s6", "click", 40, None),
]


def spark_env() -> dict:
    # The driver must run on this interpreter so that `sluice.sdk` imports (the launcher's job too).
    return {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1"}


def spark_submit(script: str | Path, *args: str, cwd: Path) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    proc = subprocess.run([str(SPARK_SUBMIT), *SPARK_ARGS, str(script), *args], cwd=cwd, env=spark_env(),
                          capture_output=True, text=True, timeout=240)
    return proc, time.monotonic() - started


def write_hand_partition(data_dir: Path) -> dict:
    location = data_dir / "experiments/clickstream/marketplace=UK/date=2026-11-22/hour=09"
    location.mkdir(parents=True)
    lines = []
    for i, (exp, bucket, user, session, kind, latency, revenue) in enumerate(HAND_EVENTS):
        event = {"event_time": f"2026-11-22T09:{i:02d}:00.000+00:00", "user_id": user, "session_id": session,
                 "page": "/", "event_type": kind, "experiment_id": exp, "bucket": bucket, "latency_ms": latency,
                 "marketplace": "UK", "currency": "GBP"}
        if revenue is not None:   # non-purchases leave revenue out entirely
            event["revenue"] = revenue
        lines.append(json.dumps(event) + "\n")
    (location / "part-00000.json").write_text("".join(lines))
    return {"key": UK_KEY, "location": str(location), "size_bytes": (location / "part-00000.json").stat().st_size,
            "record_count": len(lines), "metadata": {}}


RUN_ID, JOB_ID = "4f6d2a8e-0b1c-4d5e-9f00-000000000001", "4f6d2a8e-0b1c-4d5e-9f00-000000000002"


def context(root: Path, notifications: list[dict]) -> Path:
    doc = {
        "run_id": RUN_ID, "job_id": JOB_ID,
        "schedule": {"id": "sched-1", "name": "hourly_metrics_on_arrival", "generation": 1},
        "program": {"namespace": "experiments", "app": "clickstream", "program": "hourly_metrics"},
        "properties": {"experiment": "exp-42"},
        "system": {"logical_time": None, "data_dir": str(root / "data"), "staging_dir": str(root / "run/staging"),
                   "result_path": str(root / "run/result.json")},
        "notifications": notifications,
        "lineage": {"run_id": RUN_ID, "job_namespace": "experiments",
                    "job_name": "clickstream.hourly_metrics_on_arrival.hourly_metrics",
                    "parent_run_id": JOB_ID, "parent_job_name": "clickstream.hourly_metrics_on_arrival"},
    }
    (root / "run").mkdir(parents=True, exist_ok=True)
    path = root / "run/context.json"
    path.write_text(json.dumps(doc))
    return path


def committed(nid: str, dataset: str, partitions: list[dict]) -> dict:
    return {"id": nid, "time": "2026-11-22T10:00:05+00:00", "type": "partition_committed",
            "namespace": "experiments", "dataset": dataset, "partitions": partitions}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    if not SPARK_SUBMIT.exists():
        pytest.skip(f"no spark-submit next to {sys.executable}")
    root = tmp_path_factory.mktemp("hourly_metrics")
    generated = [generate_hour(root / "data", "experiments", m, hours_for(m, "2026-11-22", [9])[0], 1500, 42)
                 for m in ("US", "JP")]
    hand = write_hand_partition(root / "data")
    ctx = context(root, [committed("n-1", "clickstream", generated), committed("n-2", "clickstream", [hand]),
                         committed("n-3", "orders", [{**hand, "location": "/does/not/exist"}])])
    proc, seconds = spark_submit(HOURLY_METRICS_ENTRY_POINT, "--sluice-context", str(ctx), cwd=root)
    print(f"\nspark-submit hourly_metrics (3 partitions): {seconds:.1f}s")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((root / "run/result.json").read_text())
    return {"root": root, "proc": proc, "result": result, "generated": generated, "hand": hand,
            "rows": read_outputs(result, root)}


def read_outputs(result: dict, root: Path) -> dict[str, list[dict]]:
    """Rows of each staged output, by marketplace: with pyarrow if present, else a tiny spark-submit reader."""
    locations = [o["staged_location"] for o in result["outputs"]]
    try:
        import pyarrow.parquet as pq
        tables = {loc: pq.read_table(loc).to_pylist() for loc in locations}
    except ImportError:
        reader = root / "read_parquet.py"
        reader.write_text(
            "import json, sys\nfrom pyspark.sql import SparkSession\n"
            "spark = SparkSession.builder.getOrCreate()\n"
            "rows = {loc: [r.asDict() for r in spark.read.parquet('file://' + loc).collect()] for loc in sys.argv[2:]}\n"
            "open(sys.argv[1], 'w').write(json.dumps(rows))\nspark.stop()\n")
        proc, _ = spark_submit(reader, str(root / "rows.json"), *locations, cwd=root)
        assert proc.returncode == 0, proc.stderr[-3000:]
        tables = json.loads((root / "rows.json").read_text())
    return {o["key"]["marketplace"]: tables[o["staged_location"]] for o in result["outputs"]}


def by_group(rows: list[dict]) -> dict[tuple, dict]:
    return {(r["experiment_id"], r["bucket"]): r for r in rows}


def test_result_lists_one_output_per_input_partition(run):
    result, root = run["result"], run["root"]
    outputs = result["outputs"]
    assert [o["key"]["marketplace"] for o in outputs] == ["US", "JP", "UK"]
    for o in outputs:
        assert (o["namespace"], o["dataset"], o["format"]) == ("experiments", "clickstream_hourly_metrics", "parquet")
        key = o["key"]
        assert o["staged_location"] == str(root / "run/staging/clickstream_hourly_metrics" /
                                          f"marketplace={key['marketplace']}/date={key['date']}/hour={key['hour']}")
    assert [(i["dataset"], i["key"]["marketplace"]) for i in result["inputs"]] == [
        ("clickstream", "US"), ("clickstream", "JP"), ("clickstream", "UK")]   # never the orders partition
    assert result["inputs"][2]["location"] == run["hand"]["location"]
    assert result["metrics"]["rows_written"] == sum(o["record_count"] for o in outputs)
    assert result["metrics"]["input_events"] == 1500 + 1500 + len(HAND_EVENTS)
    assert result["metrics"]["input_partitions"] == 3


def test_manifest_matches_the_staged_files(run):
    for o in run["result"]["outputs"]:
        staged = Path(o["staged_location"])
        on_disk = sorted(p.relative_to(staged).as_posix() for p in staged.rglob("*") if p.is_file())
        assert on_disk == sorted(f["path"] for f in o["files"])   # no .crc or _SUCCESS left behind
        assert len(o["files"]) == 1 and o["files"][0]["path"].endswith(".parquet")
        for f in o["files"]:
            data = (staged / f["path"]).read_bytes()
            assert f["size_bytes"] == len(data)
            assert f["sha256"] == hashlib.sha256(data).hexdigest()
        assert o["size_bytes"] == sum(f["size_bytes"] for f in o["files"])


def test_program_prints_a_summary_line(run):
    assert ("hourly_metrics: 3 partition(s), 3018 events, " in run["proc"].stdout
            and "; exp-42: A converts" in run["proc"].stdout)


def test_hand_made_partition_metrics_are_exact(run):
    rows = run["rows"]["UK"]
    assert len(rows) == 3
    assert [(r["experiment_id"], r["bucket"]) for r in rows] == [("exp-42", "A"), ("exp-42", "B"), ("exp-57", "A")]
    assert all({k: r[k] for k in UK_KEY} == UK_KEY and r["currency"] == "GBP" for r in rows)
    a, b, other = (by_group(rows)[g] for g in [("exp-42", "A"), ("exp-42", "B"), ("exp-57", "A")])
    assert (a["events"], a["users"], a["sessions"], a["views"], a["clicks"], a["add_to_carts"], a["purchases"]) == \
        (9, 2, 3, 5, 2, 1, 1)
    assert a["click_through_rate"] == pytest.approx(0.4)
    assert a["conversion_rate"] == pytest.approx(1 / 3) and a["converted_sessions"] == 1
    assert a["revenue"] == pytest.approx(20.5)
    assert (a["p50_latency_ms"], a["p95_latency_ms"]) == (100, 500)
    assert (b["events"], b["users"], b["sessions"], b["views"], b["clicks"], b["purchases"]) == (8, 2, 2, 2, 2, 2)
    assert (b["click_through_rate"], b["conversion_rate"], b["revenue"]) == (1.0, 1.0, pytest.approx(15.25))
    assert (b["p50_latency_ms"], b["p95_latency_ms"]) == (120, 310)
    assert (other["events"], other["views"], other["clicks"], other["click_through_rate"]) == (1, 0, 1, None)
    assert (other["conversion_rate"], other["revenue"]) == (0.0, 0.0)


def _percentile(values: list[int], p: float) -> int:
    """percentile_approx on a small group: the smallest value with at least p of the values at or below it."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p * len(ordered)) - 1)]


@pytest.mark.parametrize("marketplace", ["US", "JP"])
def test_generated_partition_metrics_match_a_python_recount(run, marketplace):
    (partition,) = [p for p in run["generated"] if p["key"]["marketplace"] == marketplace]
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for line in (Path(partition["location"]) / "part-00000.json").read_text().splitlines():
        event = json.loads(line)
        groups[(event["experiment_id"], event["bucket"])].append(event)
    rows = by_group(run["rows"][marketplace])
    assert set(rows) == set(groups)
    assert sum(r["events"] for r in rows.values()) == partition["record_count"]
    for group, events in groups.items():
        row, kinds = rows[group], [e["event_type"] for e in events]
        assert {k: row[k] for k in partition["key"]} == partition["key"]
        assert row["events"] == len(events)
        assert row["users"] == len({e["user_id"] for e in events})
        assert row["sessions"] == len({e["session_id"] for e in events})
        assert (row["views"], row["clicks"], row["add_to_carts"], row["purchases"]) == tuple(
            kinds.count(k) for k in ("view", "click", "add_to_cart", "purchase"))
        assert row["click_through_rate"] == pytest.approx(kinds.count("click") / kinds.count("view"))
        converted = {e["session_id"] for e in events if e["event_type"] == "purchase"}
        assert row["conversion_rate"] == pytest.approx(len(converted) / row["sessions"])
        assert row["revenue"] == pytest.approx(sum(e["revenue"] for e in events if e["revenue"]), abs=0.01)
        latencies = [e["latency_ms"] for e in events]
        assert row["p50_latency_ms"] == _percentile(latencies, 0.5)
        assert row["p95_latency_ms"] == _percentile(latencies, 0.95)


def test_a_failing_program_exits_non_zero_with_one_readable_line_and_no_result(tmp_path):
    if not SPARK_SUBMIT.exists():
        pytest.skip(f"no spark-submit next to {sys.executable}")
    missing = {"key": UK_KEY, "location": str(tmp_path / "gone"), "size_bytes": 1, "record_count": 1}
    ctx = context(tmp_path, [committed("n-1", "clickstream", [missing])])
    proc, seconds = spark_submit(HOURLY_METRICS_ENTRY_POINT, "--sluice-context", str(ctx), cwd=tmp_path)
    print(f"\nspark-submit failing hourly_metrics: {seconds:.1f}s")
    assert proc.returncode != 0
    assert not (tmp_path / "run/result.json").exists()
    # Under spark-submit the Python driver's stderr is forwarded to spark-submit's stdout.
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("sluice: ")]
    assert len(lines) == 1
    assert lines[0].startswith("sluice: experiments.clickstream.hourly_metrics failed: AnalysisException: ")
    assert "PATH_NOT_FOUND" in lines[0] and str(tmp_path / "gone") in lines[0]
