"""Least privilege for programs (issue 23), end to end: `sluice standalone` started with a gRPC
token and other secrets in its environment and an event-log URL launches a real PySpark program
(real spark-submit). The program records its environment and its context file: neither holds any
secret of the server (no event-log URL, no server token, no SLUICE_* variable). It still consumes
its partitions through the Partitions API with its run credential and publishes its output; its
credential reaches no other namespace, and ends with the run."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import grpc
import pytest

from sluice.client import SluiceClient
from sluice_services.localserver import LocalServer
from sluice.v1 import datasets_pb2 as dpb
from sluice.v1 import datasets_pb2_grpc
from sluice.v1 import notifications_pb2 as npb
from sluice.v1 import schedules_pb2 as spb
from tests.e2e.conftest import eventually

pytestmark = [pytest.mark.slow, pytest.mark.integration]

NAMESPACE, APP, PROGRAM = "secure", "secure", "inspect_env"
TOKEN = "server-grpc-token-5f1c0e7a"
SECRETS = {
    "SLUICE_GRPC_TOKEN": TOKEN,
    "SLUICE_OPENLINEAGE_API_KEY": "openlineage-api-key-9b2d",
    "SLUICE_LINEAGE_TOKEN": "lineage-token-73aa",
    "SLUICE_RUN_CREDENTIAL_SECRET": "run-credential-secret-c4e1",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-0d9f",
}

INSPECT_ENV = '''"""Shows what it was given (environment, context file), then counts each new events partition."""
import json
import os
import sys
from pathlib import Path

from pyspark.sql import functions as F

from sluice.sdk import ConsumeError, run


def main(program):
    context_file = Path(sys.argv[sys.argv.index("--sluice-context") + 1])
    try:
        program.has_dataset("hidden", namespace="private")
        elsewhere = "allowed"
    except ConsumeError as error:
        elsewhere = str(error)
    Path(program.context.system.result_path).with_name("inspected.json").write_text(json.dumps({
        "environ": dict(os.environ), "context": context_file.read_text(),
        "context_mode": context_file.stat().st_mode & 0o777, "run_dir_mode": context_file.parent.stat().st_mode & 0o777,
        "elsewhere": elsewhere}))
    events = program.consume("events", format="json")
    for part in program.consumed("events"):
        counts = events.where(F.col("hour") == part.key["hour"]).groupBy("hour").count()
        program.write_output(counts, part.namespace, "counts", dict(part.key), format="json")
    return {"partitions": len(program.consumed("events"))}


if __name__ == "__main__":
    run(main)
'''


def dataset(name: str, base: Path, namespace: str = NAMESPACE) -> dpb.CreateDatasetRequest:
    return dpb.CreateDatasetRequest(dataset=dpb.Dataset(
        namespace=namespace, name=name, partition_keys=[dpb.PartitionKey(name="hour", type=dpb.KEY_TYPE_INT)],
        base_location=str(base / namespace / name)))


def test_a_real_program_holds_no_secret_of_the_server_and_still_consumes_and_publishes(tmp_path: Path):
    data_dir, apps = tmp_path / "sluice", tmp_path / "apps"
    (apps / APP).mkdir(parents=True)
    (apps / APP / f"{PROGRAM}.py").write_text(INSPECT_ENV)
    event_log = f"sqlite://{data_dir / 'events.db'}"
    secrets = {**SECRETS, "SLUICE_EVENT_LOG": event_log}
    with LocalServer(data_dir, args=["--apps-dir", str(apps)], env=secrets) as server, \
            SluiceClient(server.address, token=TOKEN) as client:
        partitions = datasets_pb2_grpc.PartitionsStub(client.channel)
        for request in (dataset("events", data_dir / "data"), dataset("counts", data_dir / "data"),
                        dataset("hidden", data_dir / "data", namespace="private")):
            partitions.CreateDataset(request, timeout=30)
        schedule = client.create_schedule(spb.Schedule(
            name="inspect_on_arrival", enabled=True,
            program=npb.ProgramRef(namespace=NAMESPACE, app=APP, program=PROGRAM),
            trigger=spb.Trigger(partition=spb.PartitionTrigger(namespace=NAMESPACE, dataset="events", count=1))))
        location = tmp_path / "incoming" / "hour=7"
        location.mkdir(parents=True)
        (location / "part-0.json").write_text("".join(json.dumps({"user": f"u{i}"}) + "\n" for i in range(5)))
        partitions.AddPartitions(dpb.AddPartitionsRequest(
            namespace=NAMESPACE, dataset="events", owner="test", partitions=[npb.PartitionRef(
                key=[npb.KeyValue(name="hour", value="7")], location=str(location), size_bytes=1, record_count=5)]),
            timeout=30)

        (run,) = eventually(lambda: (r := client.list_runs(schedule.id)) and r[0].status in (
            npb.COMPLETED, npb.FAILED) and r, timeout=300, what="the program's run to end")
        driver_log = data_dir / "runs" / run.id / "driver.log"
        assert npb.RunStatus.Name(run.status) == "COMPLETED", run.error + driver_log.read_text()[-3000:]

        # It consumed its partition through the API and its output was published.
        (published,) = partitions.ListPartitions(dpb.ListPartitionsRequest(namespace=NAMESPACE, dataset="counts"),
                                                 timeout=30).partitions
        assert [(kv.name, kv.value) for kv in published.partition.key] == [("hour", "7")]
        (row,) = [json.loads(line) for f in Path(published.partition.location).glob("*.json")
                  for line in f.read_text().splitlines()]
        assert row == {"hour": "7", "count": 5}

        inspected = json.loads((data_dir / "runs" / run.id / "inspected.json").read_text())
        environ, context_text = inspected["environ"], inspected["context"]
        # No secret of the server in the program's environment...
        assert [name for name in environ if name.startswith("SLUICE_")] == []
        assert [name for name, value in environ.items() if any(s in value for s in secrets.values())] == []
        assert "AWS_SECRET_ACCESS_KEY" not in environ and environ["PATH"]
        # ... nor in its context file, which only its owner reads.
        assert [s for s in secrets.values() if s in context_text] == []
        assert "events.db" not in context_text
        system = json.loads(context_text)["system"]
        assert "event_log" not in system
        assert system["api"]["address"] == server.address
        assert system["api"]["token"].startswith(f"sluice-run.{run.id}.")
        assert (inspected["context_mode"], inspected["run_dir_mode"]) == (0o600, 0o700)
        # Its credential reaches its own namespace only ...
        assert "PERMISSION_DENIED" in inspected["elsewhere"], inspected["elsewhere"]
        # ... and ends with its run.
        with SluiceClient(server.address, token=system["api"]["token"]) as program_client:
            with pytest.raises(grpc.RpcError) as refused:
                datasets_pb2_grpc.PartitionsStub(program_client.channel).GetDataset(
                    dpb.GetDatasetRequest(namespace=NAMESPACE, name="events"), timeout=30)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert sys.executable  # the program ran on this interpreter (PYSPARK_PYTHON)
