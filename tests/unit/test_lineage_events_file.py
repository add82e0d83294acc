"""The Spark lineage events a program's attempt left in openlineage.jsonl are its own file, so hostile: the
launcher's outbox route reads them when the run ends, on its event loop. A FIFO must not block it, a link is
not followed, and a file over the limit is left out; the events of the other attempts are still forwarded."""
from __future__ import annotations

import json
import os
from datetime import datetime, timezone

import pytest

from sluice.sdk.lineage import EVENTS_FILE
from sluice_services.launcher import lineage_events
from sluice_services.launcher.lineage_events import spark_events

AT = datetime(2026, 11, 28, tzinfo=timezone.utc)


def _event(run_id: str) -> bytes:
    return json.dumps({"eventType": "COMPLETE", "run": {"runId": run_id},
                       "job": {"namespace": "spark", "name": "app"}}).encode()


def _attempt(tmp_path, number: int):
    attempt = tmp_path / "run" / f"attempt-{number}"
    attempt.mkdir(parents=True)
    return attempt


@pytest.mark.timeout(10)
def test_an_events_file_that_is_a_fifo_is_left_out_without_waiting(tmp_path):
    good = _attempt(tmp_path, 1)
    (good / EVENTS_FILE).write_bytes(_event("spark-1") + b"\n")
    os.mkfifo(_attempt(tmp_path, 2) / EVENTS_FILE)  # nobody ever writes it: a read would block for ever
    assert spark_events(good, AT) == [_event("spark-1")]


def test_an_events_file_that_is_a_link_is_not_followed(tmp_path):
    outside = tmp_path / "elsewhere.jsonl"
    outside.write_bytes(_event("not-the-programs") + b"\n")
    attempt = _attempt(tmp_path, 1)
    (attempt / EVENTS_FILE).symlink_to(outside)
    assert spark_events(attempt, AT) == []


def test_an_events_file_over_the_limit_is_left_out(tmp_path, monkeypatch):
    monkeypatch.setattr(lineage_events, "MAX_EVENTS_FILE_BYTES", 1024)
    small, large = _attempt(tmp_path, 1), _attempt(tmp_path, 2)
    (small / EVENTS_FILE).write_bytes(_event("spark-1") + b"\n")
    (large / EVENTS_FILE).write_bytes(_event("spark-2") + b"\n" + b" " * 2048 + b"\n")
    assert spark_events(large, AT) == [_event("spark-1")]
