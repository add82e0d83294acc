"""`sluice datasets ...` and `sluice consumer show` against a running `sluice standalone`."""
from __future__ import annotations

import json
import subprocess
import sys

import grpc
import pytest

from sluice_services.localserver import LocalServer
from sluice.v1 import datasets_pb2 as pb
from sluice.v1 import datasets_pb2_grpc

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with LocalServer(tmp_path_factory.mktemp("datasets-cli") / "sluice") as running:
        yield running


def sluice(server, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sluice_services.cli", "--server", server.address, *args],
                          capture_output=True, text=True, timeout=60)


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, (result.stdout, result.stderr)
    return result.stdout


def one_line_error(result: subprocess.CompletedProcess, code: int, text: str) -> None:
    assert result.returncode == code, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sluice: error:") and text in lines[0], result.stderr


def test_datasets_partitions_and_a_consumer_from_the_command_line(server, tmp_path):
    ok(sluice(server, "datasets", "create", "web.clicks", "--key", "marketplace", "--key", "hour:INT",
              "--base-location", "/data/web/clicks", "--description", "clicks"))
    described = json.loads(ok(sluice(server, "--json", "datasets", "describe", "web.clicks")))
    assert [k["type"] for k in described["partitionKeys"]] == ["KEY_TYPE_STRING", "KEY_TYPE_INT"]
    for marketplace, hour in (("US", "9"), ("US", "10"), ("JP", "09")):
        ok(sluice(server, "datasets", "add", "web.clicks", "--key", f"marketplace={marketplace}", "--key",
                  f"hour={hour}", "--location", f"/data/web/clicks/{marketplace}/{hour}", "--record-count", "5"))
    listed = ok(sluice(server, "datasets", "list"))
    assert "web.clicks" in listed and "marketplace:STRING, hour:INT" in listed
    table = ok(sluice(server, "datasets", "partitions", "web.clicks", "--range", "hour=9..10"))
    assert [line.split()[0] for line in table.splitlines()[2:]] == ["0.0", "2.0"]   # JP's "09" is hour 9
    found = json.loads(ok(sluice(server, "--json", "datasets", "partitions", "web.clicks", "--where", "marketplace=JP",
                                 "--since", "2000-01-01T00:00Z")))
    assert [p["id"] for p in found["partitions"]] == ["2.0"]

    stub = datasets_pb2_grpc.PartitionsStub(grpc.insecure_channel(server.address))
    stub.Consume(pb.ConsumeRequest(namespace="web", dataset="clicks", consumer="hourly", taker="worker-1", limit=2))
    state = json.loads(ok(sluice(server, "consumer", "show", "web.clicks", "hourly")))
    assert state["high_water_mark"] == 3 and [i["status"] for i in state["working_set"]] == [
        "IN_PROGRESS", "IN_PROGRESS", "AVAILABLE"]
    kept = tmp_path / "state.bin"
    kept.write_bytes(stub.GetConsumer(pb.GetConsumerRequest(namespace="web", dataset="clicks", consumer="hourly")).state)
    assert json.loads(ok(sluice(server, "consumer", "show", "--state-file", str(kept)))) == state
    kept.write_bytes(kept.read_bytes()[:-10])
    one_line_error(sluice(server, "consumer", "show", "--state-file", str(kept)), 2, "consumer state: corrupt")
    assert ok(sluice(server, "datasets", "commits")).splitlines()[0].split() == [
        "SEQUENCE", "RUN", "STATUS", "STEPS", "DATASETS", "FAILURES", "ERROR"]


@pytest.mark.parametrize("args, code, text", [
    (("datasets", "describe", "web.nope"), 1, "NOT_FOUND: dataset web.nope does not exist"),
    (("datasets", "describe", "nodot"), 2, "dataset: expected NAMESPACE.NAME"),
    (("datasets", "create", "web.bad", "--key", "hour:FLOAT", "--base-location", "/b"), 2, "type must be one of"),
    (("datasets", "create", "web.bad2", "--key", "two words", "--base-location", "/b"), 1,
     "INVALID_ARGUMENT: dataset.partition_keys[0].name"),
    (("datasets", "add", "web.clicks", "--key", "marketplace=US", "--location", "/x"), 1,
     "INVALID_ARGUMENT: partitions[0].key.hour: missing"),
    (("datasets", "partitions", "web.clicks", "--range", "hour=8"), 2, "--range: expected K=LOW..HIGH"),
    (("datasets", "partitions", "web.clicks", "--since", "yesterday"), 2, "--since: not an ISO 8601 time"),
    (("consumer", "show", "web.clicks", "nobody"), 1, "NOT_FOUND: consumer web.clicks:nobody does not exist"),
])
def test_bad_input_is_one_line(server, args, code, text):
    sluice(server, "datasets", "create", "web.clicks", "--key", "marketplace", "--key", "hour:INT",
           "--base-location", "/data/web/clicks", "--description", "clicks")
    one_line_error(sluice(server, *args), code, text)
