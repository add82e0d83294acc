"""A restart of `sluice standalone` rebuilds its state from the data dir and carries on."""
from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from sluice.client import SluiceClient
from sluice.domain.common import PartitionRef
from sluice_services.localserver import LocalServer
from sluice.v1 import jobs_pb2, notifications_pb2 as npb, schedules_pb2 as spb
from sluice_examples.clickstream.generate import MARKETPLACES, generate_hour
from tests.e2e.conftest import eventually

pytestmark = [pytest.mark.slow, pytest.mark.integration]

NAMESPACE = "experiments"


def publish(client: SluiceClient, data_dir, marketplace: str) -> dict:
    local_hour = datetime(2026, 11, 22, 9, tzinfo=ZoneInfo(MARKETPLACES[marketplace]))
    partition = generate_hour(data_dir / "data", NAMESPACE, marketplace, local_hour, rows=100, seed=1)
    client.publish_partitions(NAMESPACE, "clickstream", [PartitionRef(partition["key"], partition["location"],
                                                                      partition["size_bytes"], partition["record_count"])])
    return partition


def test_restart_rebuilds_state_and_carries_on(tmp_path):
    data_dir = tmp_path / "sluice"
    schedule = spb.Schedule(
        name="two_hours", enabled=True,
        program=npb.ProgramRef(namespace=NAMESPACE, app="clickstream", program="hourly_metrics"),
        trigger=spb.Trigger(partition=spb.PartitionTrigger(namespace=NAMESPACE, dataset="clickstream", count=2)))

    with LocalServer(data_dir) as server, SluiceClient(server.address) as client:
        created = client.create_schedule(schedule)
        first = publish(client, data_dir, "US")
        pending = eventually(lambda: client.list_jobs(created.id), timeout=30, what="a pending job")
        assert [jobs_pb2.JobState.Name(j.state) for j in pending] == ["PENDING_TRIGGER"]
    assert server.process.returncode == 0

    with LocalServer(data_dir) as server, SluiceClient(server.address) as client:
        assert [s.name for s in client.list_schedules()] == ["two_hours"]
        assert [(j.id, j.state) for j in client.list_jobs(created.id)] == [(pending[0].id, jobs_pb2.PENDING_TRIGGER)]
        second = publish(client, data_dir, "JP")  # the trigger's second partition: counted with the first
        runs = eventually(lambda: (r := client.list_runs(created.id)) and r[0].status in (npb.COMPLETED, npb.FAILED) and r,
                          timeout=180, what="the run")
        assert [npb.RunStatus.Name(r.status) for r in runs] == ["COMPLETED"], runs[0].error
        assert sorted(i.location for i in runs[0].inputs) == sorted([first["location"], second["location"]])
        assert runs[0].job_id == pending[0].id

    with LocalServer(data_dir) as server, SluiceClient(server.address) as client:
        # Nothing is consumed or launched twice after another restart: the same single run and job.
        assert [(r.id, r.status) for r in client.list_runs(created.id)] == [(runs[0].id, npb.COMPLETED)]
        assert [jobs_pb2.JobState.Name(j.state) for j in client.list_jobs(created.id)] == ["LAUNCHED"]
        third = publish(client, data_dir, "UK")
        jobs = eventually(lambda: (j := client.list_jobs(created.id)) and len(j) == 2 and j, timeout=30,
                          what="a new pending job")
        assert [jobs_pb2.JobState.Name(j.state) for j in jobs] == ["LAUNCHED", "PENDING_TRIGGER"]
        assert len(client.list_runs(created.id)) == 1
        assert third["key"]["marketplace"] == "UK"
