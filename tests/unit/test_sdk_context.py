"""The program-side context: context.json parsing, errors naming the field, partition lookup."""
from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

from sluice.sdk.context import ContextError, ProgramContext, context_from_argv, load_context, parse_context


def partition(marketplace: str, hour: str = "09", location: str | None = None) -> dict:
    return {"key": {"marketplace": marketplace, "date": "2026-11-22", "hour": hour},
            "location": location or f"/data/experiments/clickstream/marketplace={marketplace}/date=2026-11-22/hour={hour}",
            "size_bytes": 1234, "record_count": 500, "metadata": {"format": "json"}}


def notification(nid: str, dataset: str, *parts: dict, namespace: str = "experiments") -> dict:
    return {"id": nid, "time": "2026-11-22T10:00:05+00:00", "type": "partition_committed",
            "namespace": namespace, "dataset": dataset, "partitions": list(parts)}


@pytest.fixture
def doc() -> dict:
    return {
        "run_id": "run-1", "job_id": "job-1",
        "schedule": {"id": "sched-1", "name": "hourly_metrics_on_arrival", "generation": 3},
        "program": {"namespace": "experiments", "app": "clickstream", "program": "hourly_metrics"},
        "properties": {"experiment": "exp-42"},
        "system": {"logical_time": "2026-11-22T10:00:00+00:00", "data_dir": "/abs/.sluice/data",
                   "staging_dir": "/abs/.sluice/runs/run-1/staging", "result_path": "/abs/.sluice/runs/run-1/result.json"},
        "notifications": [notification("n-1", "clickstream", partition("US"), partition("JP"))],
        "lineage": {"run_id": "run-1", "job_namespace": "experiments",
                    "job_name": "clickstream.hourly_metrics_on_arrival.hourly_metrics",
                    "parent_run_id": "job-1", "parent_job_name": "clickstream.hourly_metrics_on_arrival"},
    }


def write(tmp_path, document) -> str:
    path = tmp_path / "context.json"
    path.write_text(json.dumps(document) if not isinstance(document, str) else document)
    return str(path)


def test_parses_every_field(doc, tmp_path):
    ctx = load_context(write(tmp_path, doc))
    assert isinstance(ctx, ProgramContext)
    assert (ctx.run_id, ctx.job_id) == ("run-1", "job-1")
    assert (ctx.schedule.id, ctx.schedule.name, ctx.schedule.generation) == ("sched-1", "hourly_metrics_on_arrival", 3)
    assert ctx.program.qualified_name == "experiments.clickstream.hourly_metrics"
    assert dict(ctx.properties) == {"experiment": "exp-42"}
    assert ctx.logical_time == datetime(2026, 11, 22, 10, tzinfo=timezone.utc)
    assert ctx.system.staging_dir == "/abs/.sluice/runs/run-1/staging"
    assert ctx.system.result_path.endswith("result.json")
    assert ctx.lineage.job_name == ctx.app_name == "clickstream.hourly_metrics_on_arrival.hourly_metrics"
    assert ctx.lineage.parent_run_id == "job-1"
    (n,) = ctx.notifications
    assert (n.id, n.type, n.namespace, n.dataset) == ("n-1", "partition_committed", "experiments", "clickstream")
    assert n.time == datetime(2026, 11, 22, 10, 0, 5, tzinfo=timezone.utc)
    us = n.partitions[0]
    assert dict(us.key) == {"marketplace": "US", "date": "2026-11-22", "hour": "09"}
    assert list(us.key) == ["marketplace", "date", "hour"]   # the producer's order is kept
    assert (us.size_bytes, us.record_count, dict(us.metadata)) == (1234, 500, {"format": "json"})


def test_context_is_read_only(doc):
    ctx = parse_context(doc)
    with pytest.raises(AttributeError):
        ctx.run_id = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        ctx.properties["experiment"] = "exp-1"  # type: ignore[index]
    with pytest.raises(TypeError):
        ctx.partitions()[0].key["hour"] = "10"  # type: ignore[index]
    doc["properties"]["experiment"] = "changed"   # no aliasing of the source document
    assert ctx.properties["experiment"] == "exp-42"


def test_logical_time_keeps_its_offset_and_may_be_null(doc):
    doc["system"]["logical_time"] = "2026-11-22T09:00:00+09:00"
    assert parse_context(doc).logical_time.utcoffset() == timedelta(hours=9)
    doc["system"]["logical_time"] = None
    assert parse_context(doc).logical_time is None


def test_optional_parts_may_be_absent(doc):
    for name in ("schedule", "lineage", "properties"):
        del doc[name]
    ctx = parse_context(doc)
    assert ctx.schedule is None and ctx.lineage is None and dict(ctx.properties) == {}
    assert ctx.app_name == "experiments.clickstream.hourly_metrics"


def _delete(doc: dict, path: str) -> None:
    *parents, last = path.replace("]", "").replace("[", ".").split(".")
    target = doc
    for part in parents:
        target = target[int(part)] if part.isdigit() else target[part]
    del target[int(last) if last.isdigit() else last]


@pytest.mark.parametrize("field", [
    "run_id", "job_id", "program", "program.app", "system", "system.staging_dir", "system.result_path",
    "system.data_dir", "notifications", "schedule.name", "lineage.job_name",
    "notifications[0].id", "notifications[0].time", "notifications[0].dataset",
    "notifications[0].partitions", "notifications[0].partitions[1].location",
    "notifications[0].partitions[0].key", "notifications[0].partitions[1].record_count",
])
def test_missing_field_is_named(doc, field):
    _delete(doc, field)
    with pytest.raises(ContextError, match=rf"^{re.escape(field)}: missing"):
        parse_context(doc)


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["system"].update(logical_time="2026-11-22T10:00:00"), "system.logical_time: timestamp needs a time zone"),
    (lambda d: d["system"].update(logical_time="yesterday"), "system.logical_time: not an ISO-8601 timestamp"),
    (lambda d: d["notifications"][0].update(time="soon"), r"notifications\[0\].time: not an ISO-8601"),
    (lambda d: d.update(run_id=7), "run_id: must be a string, got int"),
    (lambda d: d.update(run_id=""), "run_id: must not be empty"),
    (lambda d: d.update(job_id=None), "job_id: must not be null"),
    (lambda d: d.update(notifications={}), "notifications: must be a list, got dict"),
    (lambda d: d["schedule"].update(generation="3"), "schedule.generation: must be an integer, got str"),
    (lambda d: d["schedule"].update(generation=True), "schedule.generation: must be an integer, got bool"),
    (lambda d: d["properties"].update(retries=3), "properties.retries: must be a string, got int"),
    (lambda d: d["notifications"][0]["partitions"][0].update(size_bytes="12"),
     r"notifications\[0\].partitions\[0\].size_bytes: must be an integer"),
    (lambda d: d["notifications"][0]["partitions"][1]["key"].update(hour=9),
     r"notifications\[0\].partitions\[1\].key.hour: must be a string, got int"),
    (lambda d: d["notifications"][0]["partitions"][0].update(key={}),
     r"notifications\[0\].partitions\[0\].key: must not be empty"),
    (lambda d: d["notifications"].append("n-2"), r"notifications\[1\]: must be an object, got str"),
    (lambda d: d.__setitem__("program", ["experiments"]), "program: must be an object, got list"),
])
def test_malformed_field_is_named(doc, mutate, message):
    mutate(doc)
    with pytest.raises(ContextError, match=message):
        parse_context(doc)


def test_other_notification_types_carry_no_partitions(doc):
    doc["notifications"].append({"id": "n-2", "time": "2026-11-22T10:00:06Z", "type": "time_tick",
                                 "schedule_id": "sched-1"})
    ctx = parse_context(doc)
    assert ctx.notifications[1].type == "time_tick" and ctx.notifications[1].partitions == ()
    assert len(ctx.partitions()) == 2


def test_partitions_filter_by_dataset_and_namespace(doc):
    doc["notifications"].append(notification("n-2", "orders", partition("UK")))
    doc["notifications"].append(notification("n-3", "clickstream", partition("UK"), namespace="sandbox"))
    ctx = parse_context(doc)
    assert [p.key["marketplace"] for p in ctx.partitions()] == ["US", "JP", "UK", "UK"]
    assert [p.key["marketplace"] for p in ctx.partitions("clickstream")] == ["US", "JP", "UK"]
    assert [p.key["marketplace"] for p in ctx.partitions("clickstream", namespace="experiments")] == ["US", "JP"]
    assert [(p.namespace, p.dataset) for p in ctx.partitions("orders")] == [("experiments", "orders")]
    assert ctx.partitions("nothing") == ()
    assert ctx.partitions("clickstream")[0].location.endswith("marketplace=US/date=2026-11-22/hour=09")


def test_a_partition_committed_twice_is_listed_once_with_its_latest_location(doc):
    doc["notifications"].append(notification("n-2", "clickstream", partition("US", location="/data/retry/US")))
    parts = parse_context(doc).partitions("clickstream")
    assert [(p.key["marketplace"], p.location) for p in parts] == [
        ("JP", "/data/experiments/clickstream/marketplace=JP/date=2026-11-22/hour=09"), ("US", "/data/retry/US")]


def test_load_context_reports_unreadable_and_invalid_files(tmp_path):
    with pytest.raises(ContextError, match="cannot read context file .*nope.json"):
        load_context(tmp_path / "nope.json")
    with pytest.raises(ContextError, match="is not valid JSON: .* line 1 column"):
        load_context(write(tmp_path, '{"run_id": '))
    with pytest.raises(ContextError, match="context: must be an object, got list"):
        load_context(write(tmp_path, "[]"))


@pytest.mark.parametrize("form", ["separate", "equals"])
def test_context_from_argv_finds_the_flag(doc, tmp_path, form):
    path = write(tmp_path, doc)
    args = ["--sluice-context", path] if form == "separate" else [f"--sluice-context={path}"]
    assert context_from_argv(["--verbose", *args, "extra"]).run_id == "run-1"


def test_context_from_argv_defaults_to_sys_argv(doc, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["hourly_metrics.py", "--sluice-context", write(tmp_path, doc)])
    assert context_from_argv().job_id == "job-1"


@pytest.mark.parametrize("argv, message", [
    ([], "missing --sluice-context PATH argument"),
    (["--sluice-context"], "--sluice-context needs a path"),
    (["--sluice-context", "--other"], "--sluice-context needs a path"),
    (["--sluice-context="], "--sluice-context needs a path"),
])
def test_context_from_argv_errors(argv, message):
    with pytest.raises(ContextError, match=message):
        context_from_argv(argv)


def test_context_module_does_not_import_pyspark():
    code = "import sys, sluice.sdk, sluice.sdk.context; assert 'pyspark' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_parse_does_not_mutate_its_input(doc):
    before = copy.deepcopy(doc)
    parse_context(doc)
    assert doc == before
