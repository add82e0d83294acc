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

SERVED = {
    "registry": {"sluice.v1.ScheduleRegistry", "sluice.v1.Notifications"},
    "matcher": set(),
    "checker": {"sluice.v1.Jobs"},
    "launcher": {"sluice.v1.Runs", "sluice.v1.Partitions"},
    "lineage": {"sluice.v1.Lineage"},
}


@pytest.mark.parametrize("name", sorted(SERVED))
def test_service_runs_alone_and_answers_health_and_reflection(tmp_path, name):
    process = subprocess.Popen([sys.executable, "-m", f"sluice_services.{name}", "--data-dir", str(tmp_path),
                                "--port", "0"], stdout=subprocess.PIPE, text=True)
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
