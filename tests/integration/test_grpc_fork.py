"""A process that imports sluice and keeps gRPC busy can still start children with a preexec_fn (as
pyspark starts its Java gateway): with grpcio's fork handlers on, ~3% of them died before exec."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.integration

CHILDREN = 1000
"""Without the setting 17 to 31 of 1,000 died (runs on this VM): all 1,000 starting by chance is unlikely."""

PROGRAM = textwrap.dedent(f"""
    import os, subprocess, sys, threading
    import sluice.client  # imports grpc, after sluice itself
    import grpc
    from concurrent import futures
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    server = grpc.server(futures.ThreadPoolExecutor(4))
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    stub = health_pb2_grpc.HealthStub(grpc.insecure_channel(f"127.0.0.1:{{port}}"))
    done = threading.Event()

    def calls():
        while not done.is_set():
            stub.Check(health_pb2.HealthCheckRequest(), timeout=10)

    threads = [threading.Thread(target=calls, daemon=True) for _ in range(2)]
    for thread in threads:
        thread.start()
    failed = sum(subprocess.run(["/bin/true"], preexec_fn=lambda: None).returncode != 0 for _ in range({CHILDREN}))
    done.set()
    for thread in threads:
        thread.join()
    print(failed, flush=True)
    os._exit(0)  # what is measured is done: gRPC's own shutdown is not (it hung a CI run once, past 120 s)
""")


def test_children_started_with_a_preexec_fn_beside_busy_grpc_threads_all_start():
    env = {key: value for key, value in os.environ.items() if key != "GRPC_ENABLE_FORK_SUPPORT"}
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "0", (done.stdout, done.stderr[-2000:])
