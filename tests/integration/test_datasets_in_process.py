"""`sluice standalone` with authorization by a policy file alone (no --grpc-token): its launcher still
publishes a finished run's outputs through the datasets service's RunData API in the same process
(with a token of its own), while a caller the policy does not make an admin of every namespace
cannot call RunData at all. The program is the stand-in for spark-submit (tests/support)."""
from __future__ import annotations

import sys
from pathlib import Path

import grpc
import pytest

from sluice.client import SluiceClient
from sluice.domain.common import PartitionRef
from sluice.runtime.auth_policy import hash_token
from sluice.v1 import datasets_pb2 as dpb
from sluice.v1 import datasets_pb2_grpc
from sluice.v1 import notifications_pb2 as npb
from sluice.v1 import schedules_pb2 as spb
from sluice_services.localserver import LocalServer
from tests.e2e.conftest import eventually

pytestmark = pytest.mark.integration

STAND_IN = Path(__file__).parents[1] / "support" / "stand_in_program.py"
ADMIN, OPERATOR = "token-admin-of-web", "token-operator-everywhere"
FINISHED = (npb.COMPLETED, npb.FAILED, npb.LOST)


def test_a_policy_only_standalone_publishes_through_its_own_datasets_service(tmp_path: Path):
    policy = tmp_path / "policy.toml"
    policy.write_text(f'[[principal]]\nname = "admin"\ntoken_sha256 = "{hash_token(ADMIN)}"\n'
                      f'grants = [{{ role = "admin", namespace = "web" }}]\n\n'
                      f'[[principal]]\nname = "operator"\ntoken_sha256 = "{hash_token(OPERATOR)}"\n'
                      f'grants = [{{ role = "operator", namespace = "*" }}]\n')
    spark_submit = tmp_path / "spark-submit"
    spark_submit.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STAND_IN}" "$@"\n')
    spark_submit.chmod(0o755)
    apps = tmp_path / "apps"
    (apps / "counting").mkdir(parents=True)
    (apps / "counting" / "count.py").write_text("# the stand-in runs instead\n")
    args = ["--auth-policy", str(policy), "--spark-submit", str(spark_submit), "--apps-dir", str(apps)]
    with LocalServer(tmp_path / "data", args=args) as server, SluiceClient(server.address, token=ADMIN) as client:
        created = client.create_schedule(spb.Schedule(
            name="on_clicks", enabled=True, program=npb.ProgramRef(namespace="web", app="counting", program="count"),
            trigger=spb.Trigger(partition=spb.PartitionTrigger(namespace="web", dataset="clicks", count=1))))
        client.publish_partitions("web", "clicks", [PartitionRef({"hour": "1"}, str(tmp_path / "clicks"))])
        (run,) = eventually(lambda: (r := client.list_runs(created.id)) and all(x.status in FINISHED for x in r) and r,
                            timeout=120, what="the run to finish")
        assert npb.RunStatus.Name(run.status) == "COMPLETED", run.error
        (output,) = run.outputs
        assert (Path(output.partition.location) / "part-0.json").is_file()

        with grpc.insecure_channel(server.address) as channel:
            stub = datasets_pb2_grpc.RunDataStub(channel)
            for token in (ADMIN, OPERATOR):  # an admin of one namespace, an operator of all: neither
                with pytest.raises(grpc.RpcError) as refused:
                    stub.OpenRun(dpb.OpenRunRequest(run_id="run-x", grants=[dpb.RunGrant(namespace="web",
                                                                                          datasets=["*"])]),
                                 metadata=(("authorization", f"Bearer {token}"),), timeout=10)
                assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED
