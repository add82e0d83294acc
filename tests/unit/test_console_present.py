"""The web console's pure parts: triggers in words, next fire, the lineage layout, and which actions
a principal's grants offer (the servers still decide)."""
from __future__ import annotations

from datetime import datetime, timezone

from sluice.v1 import access_pb2, lineage_pb2, schedules_pb2
from sluice_services.web import present
from sluice_services.web.api import Identity

NOW = datetime(2026, 11, 26, 9, 0, tzinfo=timezone.utc)


def trigger(**kind) -> schedules_pb2.Trigger:
    return schedules_pb2.Trigger(**kind)


def test_triggers_in_words():
    assert present.trigger_words(trigger(time={"cron": "0 2 * * *", "zone": "Asia/Tokyo"})) == \
        "every day at 02:00 Asia/Tokyo (cron 0 2 * * *)"
    assert present.trigger_words(trigger(time={"cron": "*/5 * * * *"})) == "every 5 minutes UTC (cron */5 * * * *)"
    assert present.trigger_words(trigger(time={"cron": "30 1 1,15 * *"})) == "at cron 30 1 1,15 * * (UTC)"
    assert present.trigger_words(trigger(partition={"namespace": "web", "dataset": "clicks", "count": 3,
                                                    "filter": {"region": {"values": ["eu", "us"]}}})) == \
        "3 new partitions of web.clicks where region in eu/us"
    both = trigger(**{"and": {"all_of": [trigger(time={"cron": "0 * * * *"}),
                                         trigger(data_size={"namespace": "n", "dataset": "d", "min_bytes": 2048})]}})
    assert present.trigger_words(both) == "(every hour at :00 UTC (cron 0 * * * *)) AND (2,048 bytes of new data in n.d)"
    assert present.trigger_words(trigger(elapsed={"seconds": 5400})) == "1 h 30 min elapsed"


def test_next_fire_of_time_triggers_anywhere_in_the_trigger():
    nightly = schedules_pb2.Schedule(trigger=trigger(time={"cron": "0 2 * * *", "zone": "Asia/Tokyo"}), enabled=True)
    assert present.next_fire_text(nightly, NOW) == "2026-11-26 17:00 UTC"
    nightly.enabled = False
    assert present.next_fire_text(nightly, NOW) == "2026-11-26 17:00 UTC (when enabled)"
    either = schedules_pb2.Schedule(enabled=True, trigger=trigger(**{"or": {"any_of": [
        trigger(partition={"namespace": "n", "dataset": "d"}), trigger(time={"cron": "15 9 * * *"})]}}))
    assert present.next_fire_text(either, NOW) == "2026-11-26 09:15 UTC"
    assert present.next_fire_text(schedules_pb2.Schedule(trigger=trigger(elapsed={"seconds": 1})), NOW) == ""


def test_lineage_layout_puts_readers_right_of_what_they_read_and_survives_cycles():
    nodes = [lineage_pb2.LineageNode(id=i, type=t) for i, t in
             (("dataset:w:in", "DATASET"), ("job:w:count", "JOB"), ("dataset:w:out", "DATASET"))]
    edges = [lineage_pb2.LineageEdge(origin="dataset:w:in", destination="job:w:count"),
             lineage_pb2.LineageEdge(origin="job:w:count", destination="dataset:w:out"),
             lineage_pb2.LineageEdge(origin="job:w:count", destination="dataset:w:elsewhere")]  # beyond depth
    graph = present.layout(nodes, edges, focus="job:w:count")
    x = {box.id: box.x for box in graph.boxes}
    assert x["dataset:w:in"] < x["job:w:count"] < x["dataset:w:out"]
    assert len(graph.arrows) == 2 and [b.id for b in graph.boxes if b.focus] == ["job:w:count"]
    cycle = edges[:2] + [lineage_pb2.LineageEdge(origin="dataset:w:out", destination="dataset:w:in")]
    assert len(present.layout(nodes, cycle).boxes) == 3


def test_actions_offered_follow_the_grants_and_everything_without_authorization():
    reader = Identity("token:rita", True, (access_pb2.AccessGrant(role="reader", namespace="*"),))
    operator = Identity("token:olga", True, (access_pb2.AccessGrant(role="operator", namespace="web"),))
    assert not reader.may("schedules.write", "web") and reader.may("schedules.read", "web")
    assert operator.may("schedules.write", "web") and not operator.may("schedules.write", "other")
    assert not operator.may("commits.release", "web")
    assert Identity("anonymous", False).may("commits.release", "web")
