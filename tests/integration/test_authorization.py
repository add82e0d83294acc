"""Authorization on loopback, real gRPC and real HTTP: principals of a policy file by hashed token
or mTLS subject, refusals naming what is lacking, ListDatasets filtered, `sluice auth whoami`,
serving beyond loopback refused without authentication, and the HTTP side over TLS."""
from __future__ import annotations

import asyncio
import hmac
import ssl
import subprocess
import sys
import urllib.error
import urllib.request

import grpc
import pytest

from sluice.bus.inprocess import InProcessBus
from sluice_services.cli.main import main
from sluice.clock import SystemClock
from sluice.eventlog.sqlite import SqliteEventLog
from sluice_services.localserver import LocalServer
from sluice.runtime.access import ANY_NAMESPACE, Grant, Principal, Role
from sluice.runtime.auth_policy import TokenAuthenticator, hash_token, parse_policy
from sluice.runtime.grpc_security import GrpcSecurity
from sluice.runtime.service import run_services
from sluice.v1 import access_pb2, access_pb2_grpc, datasets_pb2, datasets_pb2_grpc, schedules_pb2, schedules_pb2_grpc
from sluice_services.composition import registry_spec
from tests.integration.test_grpc_security import authority, certificate  # noqa: F401  (openssl fixtures)

pytestmark = pytest.mark.integration

ALICE, BOB = "alice-token", "bob-token"
POLICY = f"""
[[principal]]
name = "alice"
token_sha256 = "{hash_token(ALICE)}"
grants = [{{ role = "reader", namespace = "experiments" }},
          {{ role = "producer", namespace = "clickstream", datasets = ["events"] }}]

[[principal]]
name = "bob"
token_sha256 = "{hash_token(BOB)}"
grants = [{{ role = "admin", namespace = "*" }}]

[[principal]]
name = "client"
mtls_subject = "CN=client"
grants = [{{ role = "operator", namespace = "experiments" }}, {{ role = "reader", namespace = "*" }}]
"""


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def schedule(namespace: str) -> schedules_pb2.Schedule:
    return schedules_pb2.Schedule(name="s", program={"namespace": namespace, "app": "a", "program": "p"},
                                  trigger={"time": {"cron": "0 * * * *", "zone": "UTC"}})


def test_tokens_are_stored_hashed_and_every_hash_is_compared_in_constant_time():
    compared = []

    def counting(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return hmac.compare_digest(a, b)

    policy = parse_policy(POLICY, compare=counting)
    assert ALICE not in POLICY and BOB not in POLICY
    assert policy.authenticate(ALICE, None).name == "token:alice"
    assert policy.authenticate(hash_token(ALICE), None) is None  # the stored hash is no credential
    assert policy.authenticate("nobody", None) is None
    assert [len(a) for a, _ in compared] == [64] * 6  # each call compared both tokens' hashes, matched or not
    assert parse_policy.__defaults__[-1] is hmac.compare_digest  # what a server uses
    server = TokenAuthenticator("s3cret", Principal("token:server", (Grant(Role.ADMIN, ANY_NAMESPACE),)), counting)
    assert server.authenticate("s3cret", None) is not None and server.authenticate("s3cretx", None) is None
    assert len(compared) == 8


@pytest.fixture
async def registry(tmp_path, authority):  # noqa: F811
    """The registry with the policy, over mutual TLS (a token is sent over it too); its metrics endpoint."""
    log, bus = SqliteEventLog(tmp_path / "events.db"), InProcessBus()
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    metrics_ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()
    security = GrpcSecurity(tls_cert=authority["server"], tls_key=authority["server_key"],
                            tls_client_ca=authority["ca"], policy=parse_policy(POLICY))
    services = asyncio.create_task(run_services(
        [registry_spec(log, SystemClock(), bus.producer())], bus, log, stop=stop, security=security,
        metrics_port=0, on_metrics_ready=metrics_ready.set_result, on_ready=ready.set_result))
    try:
        await asyncio.wait([ready, services], timeout=30, return_when=asyncio.FIRST_COMPLETED)
        yield f"127.0.0.1:{ready.result()}", f"127.0.0.1:{metrics_ready.result()}"
    finally:
        stop.set()
        await services
        await bus.close()
        log.close()


def mtls_channel(address: str, files) -> grpc.aio.Channel:
    return grpc.aio.secure_channel(address, grpc.ssl_channel_credentials(
        files["ca"].read_bytes(), files["client_key"].read_bytes(), files["client"].read_bytes()))


async def test_an_mtls_subject_is_a_principal_and_a_token_over_mtls_speaks_for_itself(registry, authority):  # noqa: F811
    address, _ = registry
    async with mtls_channel(address, authority) as channel:
        whoami = await access_pb2_grpc.AccessStub(channel).WhoAmI(access_pb2.WhoAmIRequest(), timeout=10)
        assert (whoami.principal, whoami.authorization) == ("mtls:CN=client", True)
        assert [(g.role, g.namespace) for g in whoami.grants] == [("operator", "experiments"), ("reader", "*")]
        stub = schedules_pb2_grpc.ScheduleRegistryStub(channel)
        created = await stub.CreateSchedule(schedules_pb2.CreateScheduleRequest(schedule=schedule("experiments")))
        assert created.program.namespace == "experiments"
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.CreateSchedule(schedules_pb2.CreateScheduleRequest(schedule=schedule("finance")), timeout=10)
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert refused.value.details() == "mtls:CN=client lacks schedules.write on namespace finance"

        as_alice = await access_pb2_grpc.AccessStub(channel).WhoAmI(access_pb2.WhoAmIRequest(), metadata=bearer(ALICE))
        assert as_alice.principal == "token:alice"
        with pytest.raises(grpc.aio.AioRpcError) as refused:  # alice reads experiments, writes nothing
            await stub.DisableSchedule(schedules_pb2.DisableScheduleRequest(id=created.id), metadata=bearer(ALICE))
        assert refused.value.details() == "token:alice lacks schedules.write on namespace experiments"
        assert (await stub.GetSchedule(schedules_pb2.GetScheduleRequest(id=created.id), metadata=bearer(ALICE))).name
        with pytest.raises(grpc.aio.AioRpcError) as unknown:
            await stub.ListSchedules(schedules_pb2.ListSchedulesRequest(), metadata=bearer("guess"), timeout=10)
        assert unknown.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.aio.AioRpcError) as everywhere:  # a listing of every namespace needs "*"
            await stub.ListSchedules(schedules_pb2.ListSchedulesRequest(), metadata=bearer(ALICE), timeout=10)
        assert everywhere.value.details() == "token:alice lacks schedules.read on every namespace (*)"


def https_get(url: str, files, token: str | None, client_cert: bool = True) -> int:
    context = ssl.create_default_context(cafile=str(files["ca"]))
    if client_cert:
        context.load_cert_chain(files["client"], files["client_key"])
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10, context=context) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code


async def test_the_metrics_endpoint_speaks_tls_with_the_servers_certificate_and_asks_the_policy(registry, authority):  # noqa: F811
    _, metrics = registry
    url = f"https://{metrics}/metrics"
    assert await asyncio.to_thread(https_get, url, authority, None) == 200          # mtls:CN=client reads "*"
    assert await asyncio.to_thread(https_get, url, authority, ALICE) == 403         # alice: not on every namespace
    assert await asyncio.to_thread(https_get, url, authority, BOB) == 200
    assert await asyncio.to_thread(https_get, url, authority, "guess") == 401
    assert await asyncio.to_thread(https_get, f"https://{metrics}/healthz", authority, None) == 200
    with pytest.raises((urllib.error.URLError, ConnectionError, ssl.SSLError)):  # no client certificate: refused
        await asyncio.to_thread(https_get, url, authority, BOB, False)
    with pytest.raises(Exception):  # and no plaintext at all
        await asyncio.to_thread(urllib.request.urlopen, f"http://{metrics}/metrics", None, 10)


def test_whoami_and_refusals_through_the_cli_and_datasets_listed_as_far_as_readable(tmp_path, capsys):
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    with LocalServer(tmp_path / "data", env={"SLUICE_AUTH_POLICY": str(policy)}) as server:
        assert main(["--server", server.address, "--token", ALICE, "auth", "whoami"]) == 0
        assert capsys.readouterr().out == ("principal: token:alice\ngrants:\n  reader on experiments\n"
                                           "  producer on clickstream datasets events\n")
        assert main(["--server", server.address, "--token", "guess", "auth", "whoami"]) == 1
        assert "UNAUTHENTICATED" in capsys.readouterr().err
        assert main(["--server", server.address, "--token", ALICE, "schedules", "list", "--namespace", "finance"]) == 1
        assert capsys.readouterr().err == ("sluice: error: PERMISSION_DENIED: token:alice lacks schedules.read on "
                                           "namespace finance\n")
        with grpc.insecure_channel(server.address) as channel:
            stub = datasets_pb2_grpc.PartitionsStub(channel)
            for name in ("events", "sessions"):
                stub.CreateDataset(datasets_pb2.CreateDatasetRequest(dataset={
                    "namespace": "clickstream", "name": name, "base_location": str(tmp_path / name),
                    "partition_keys": [{"name": "hour", "type": "KEY_TYPE_STRING"}]}), metadata=bearer(BOB))
            listed = stub.ListDatasets(datasets_pb2.ListDatasetsRequest(namespace="clickstream"), metadata=bearer(ALICE))
            assert [d.name for d in listed.datasets] == ["events"]
            everything = stub.ListDatasets(datasets_pb2.ListDatasetsRequest(), metadata=bearer(BOB))
            assert [d.name for d in everything.datasets] == ["events", "sessions"]
            with pytest.raises(grpc.RpcError) as refused:
                stub.GetDataset(datasets_pb2.GetDatasetRequest(namespace="clickstream", name="sessions"),
                                metadata=bearer(ALICE))
            assert refused.value.details() == "token:alice lacks datasets.read on namespace clickstream, dataset sessions"


def test_without_a_policy_or_token_whoami_says_authorization_is_off(tmp_path, capsys):
    with LocalServer(tmp_path / "data", command=("serve", "registry")) as server:
        assert main(["--server", server.address, "auth", "whoami"]) == 0
    assert capsys.readouterr().out == ("principal: anonymous\n"
                                       "authorization: off (the server checks no credentials: every call is allowed)\n")


def test_hash_token_prints_the_sha256_of_stdin():
    hashed = subprocess.run([sys.executable, "-m", "sluice_services.cli", "auth", "hash-token"], input="s3cret\n",
                            capture_output=True, text=True, timeout=60)
    assert (hashed.returncode, hashed.stdout) == (0, hash_token("s3cret") + "\n")


def serve_registry(tmp_path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sluice_services.cli", "serve", "registry", "--data-dir", str(tmp_path),
                           "--port", "0", *args], capture_output=True, text=True, timeout=60,
                          env={**__import__("os").environ, **(env or {})})


def test_serving_beyond_loopback_without_authentication_is_refused_unless_insecure(tmp_path):
    refused = serve_registry(tmp_path, "--host", "0.0.0.0")
    assert refused.returncode == 2
    assert refused.stderr == ("sluice: error: host 0.0.0.0: serving beyond loopback without authentication: give "
                              "--grpc-token, --auth-policy or --tls-client-ca, or --insecure (SLUICE_INSECURE=1) to "
                              "serve anyone who connects\n")
    for insecure in ({"args": ("--insecure",)}, {"env": {"SLUICE_INSECURE": "1"}}, {"env": {"SLUICE_GRPC_TOKEN": "t"}}):
        with LocalServer(tmp_path / "data", command=("serve", "registry"),
                         args=("--host", "0.0.0.0", *insecure.get("args", ())), env=insecure.get("env")) as server:
            assert server.address.startswith("0.0.0.0:")


def test_a_policy_file_that_cannot_be_used_stops_the_server_in_one_line(tmp_path):
    policy = tmp_path / "policy.toml"
    policy.write_text('[[principal]]\nname = "x"\ntoken_sha256 = "abc"\n')
    failed = serve_registry(tmp_path, "--auth-policy", str(policy))
    assert failed.returncode == 2
    assert failed.stderr == (f"sluice: error: {policy}: principal[0].token_sha256: 64 hex digits are required "
                             "(sluice auth hash-token < token-file)\n")


async def test_the_lineage_http_api_speaks_tls_and_authorizes_reads(tmp_path, certificate):  # noqa: F811
    from sluice.clock import SimulatedClock
    from sluice.runtime.http_auth import server_ssl_context
    from sluice_services.lineage import http_api
    from sluice_services.lineage.service import LineageService

    cert, key = certificate
    security = GrpcSecurity(tls_cert=cert, tls_key=key, policy=parse_policy(POLICY))
    log = SqliteEventLog(tmp_path / "events.db")
    runner = await http_api.serve(LineageService(log, SimulatedClock()), "127.0.0.1", 0,
                                  authorizer=security.authorizer(), ssl_context=server_ssl_context(security))
    base = f"https://127.0.0.1:{http_api.bound_port(runner)}/api/v1/namespaces"
    files = {"ca": cert}
    try:
        assert await asyncio.to_thread(https_get, f"{base}/experiments/jobs", files, ALICE, False) == 200
        assert await asyncio.to_thread(https_get, f"{base}/finance/jobs", files, ALICE, False) == 403
        assert await asyncio.to_thread(https_get, f"{base}/finance/jobs", files, None, False) == 401
    finally:
        await runner.cleanup()
        log.close()
