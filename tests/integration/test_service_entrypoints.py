"""Each service runs alone as its own process (`python -m sluice_services.<name>`), with gRPC health
checking and reflection."""
from __future__ import annotations

import signal
import subprocess
import sys

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

pytestmark = pytest.mark.integration

NEEDS = {"launcher": ["--datasets-address", "127.0.0.1:9"]}
"""It starts without the datasets service up: it is asked only once a run needs it."""
SERVED = {
    "registry": {"sluice.v1.ScheduleRegistry", "sluice.v1.Notifications", "sluice.v1.DeadLetters", "sluice.v1.EventLog"},
    "matcher": set(),
    "checker": {"sluice.v1.Jobs"},
    "datasets": {"sluice.v1.Partitions", "sluice.v1.RunData"},
    "launcher": {"sluice.v1.Runs"},
    "lineage": {"sluice.v1.Lineage"},
    "alerts": {"sluice.v1.Alerts"},
}


@pytest.mark.parametrize("name", sorted(SERVED))
def test_service_runs_alone_and_answers_health_and_reflection(tmp_path, name):
    process = subprocess.Popen([sys.executable, "-m", f"sluice_services.{name}", "--data-dir", str(tmp_path),
                                "--port", "0", *NEEDS.get(name, [])], stdout=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        assert f"sluice {name} ready on 127.0.0.1:" in line
        address = line.split(" ready on ")[1].split()[0]
        with grpc.insecure_channel(address) as channel:
            health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
            assert health.status == health_pb2.HealthCheckResponse.SERVING
            reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
            responses = reflection.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                                                        timeout=10)
            names = {s.name for r in responses for s in r.list_services_response.service}
            assert SERVED[name] <= names and "grpc.health.v1.Health" in names
            every_server = {"sluice.v1.Access"}  # WhoAmI: who the caller is to this server
            assert not any(n.startswith("sluice.v1.") and n not in SERVED[name] | every_server for n in names)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
        process.stdout.close()


def test_the_launcher_alone_refuses_to_start_without_the_datasets_service_address(tmp_path):
    ended = subprocess.run([sys.executable, "-m", "sluice_services.launcher", "--data-dir", str(tmp_path),
                            "--port", "0"], capture_output=True, text=True, timeout=60)
    assert ended.returncode == 2
    assert ended.stderr.strip().splitlines()[-1] == (
        "sluice: error: datasets_address: the launcher needs the datasets service's address: give "
        "--datasets-address HOST:PORT (env SLUICE_DATASETS_ADDRESS)")
