"""`sluice lineage show [JOB]` against a real gRPC Lineage server: the whole forest, or one job's tree."""
from __future__ import annotations

import asyncio
import sys
from datetime import timedelta

import grpc
import pytest
from openlineage.client.event_v2 import RunState

from sluice.clock import SimulatedClock
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.v1 import lineage_pb2_grpc
from sluice_services.launcher import lineage_events
from sluice_services.lineage.grpc_api import LineageServicer
from sluice_services.lineage.service import LineageService
from tests.unit.test_lineage_hierarchy import DAILY, HOURLY, T0, clickstream_runs, spark_application

pytestmark = pytest.mark.integration


@pytest.fixture
async def address(tmp_path):
    log = SqliteEventLog(":memory:", clock=SimulatedClock(T0))
    service = LineageService(log, SimulatedClock(T0))
    for offset, run in enumerate(clickstream_runs()):
        attempt_dir = tmp_path / run.id
        spark_application(run, attempt_dir, True)
        for message in [*lineage_events.run_started(run, T0 + timedelta(minutes=offset)),
                        *lineage_events.run_ended(run, RunState.COMPLETE, T0 + timedelta(minutes=9), attempt_dir)]:
            service.handle_message(message)
    server = grpc.aio.server()
    lineage_pb2_grpc.add_LineageServicer_to_server(LineageServicer(service), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield f"127.0.0.1:{port}"
    await server.stop(None)
    log.close()


async def sluice(address: str, *args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "sluice_services.cli", "--server", address, *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 60)
    return process.returncode, out.decode(), err.decode()


async def test_lineage_show_prints_the_tree_of_one_job_or_of_all(address):
    code, out, _ = await sluice(address, "lineage", "show", "hourly_metrics")      # a simple name
    lines = out.splitlines()
    assert code == 0
    assert lines[0] == f"experiments:{HOURLY}.hourly_metrics  [3 runs: 3 COMPLETE]"
    assert f"└─ experiments:{HOURLY}.hourly_metrics.spark  [3 runs: 3 COMPLETE]" in lines
    assert not any(DAILY in line or line.startswith(f"experiments:{HOURLY} ") for line in lines)
    assert sum(" run " in line for line in lines) == 6

    code, out, _ = await sluice(address, "lineage", "show", DAILY)                  # fully qualified
    assert code == 0 and out.splitlines()[0] == f"experiments:{DAILY}  [3 runs: 3 COMPLETE]"
    assert sum(" run " in line for line in out.splitlines()) == 9 and HOURLY not in out

    code, out, _ = await sluice(address, "lineage", "show")
    roots = [line for line in out.splitlines() if line.startswith("experiments:")]
    assert code == 0 and roots == [f"experiments:{DAILY}  [3 runs: 3 COMPLETE]", f"experiments:{HOURLY}  [3 runs: 3 COMPLETE]"]

    code, out, err = await sluice(address, "lineage", "show", "nope")
    assert (code, out, err.strip()) == (1, "", "sluice: error: no job 'nope' in lineage")
