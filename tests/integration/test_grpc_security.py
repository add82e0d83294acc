"""The gRPC API behind a bearer token and TLS, on loopback: a call without the token, or with another,
ends UNAUTHENTICATED saying what to send (and is counted as such); health checks need no token; the
client and the CLI send the token and speak TLS to a `sluice serve` process given a certificate."""
from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from sluice.bus.inprocess import InProcessBus
from sluice_services.cli.main import main
from sluice.client import SluiceClient
from sluice.clock import SystemClock
from sluice.eventlog.sqlite import SqliteEventLog
from sluice_services.localserver import LocalServer
from sluice.runtime.grpc_security import GrpcSecurity
from sluice.runtime.metrics import Registry
from sluice.runtime.service import run_services
from sluice.v1 import schedules_pb2, schedules_pb2_grpc
from sluice_services.composition import registry_spec

pytestmark = pytest.mark.integration

TOKEN = "s3cret-token"


@pytest.fixture
async def registry(tmp_path):
    """The registry served by run_services with a token, in this process: (address, metrics registry)."""
    log, bus, metrics = SqliteEventLog(tmp_path / "events.db"), InProcessBus(), Registry()
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()
    services = asyncio.create_task(run_services(
        [registry_spec(log, SystemClock(), bus.producer())], bus, log, stop=stop, metrics=metrics,
        security=GrpcSecurity(TOKEN), on_ready=ready.set_result))
    try:
        await asyncio.wait([ready, services], timeout=30, return_when=asyncio.FIRST_COMPLETED)
        yield f"127.0.0.1:{ready.result()}", metrics
    finally:
        stop.set()
        await services
        await bus.close()
        log.close()


async def list_schedules(address: str, metadata: tuple[tuple[str, str], ...] = ()) -> schedules_pb2.ListSchedulesResponse:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = schedules_pb2_grpc.ScheduleRegistryStub(channel)
        return await stub.ListSchedules(schedules_pb2.ListSchedulesRequest(), metadata=metadata, timeout=10)


async def test_a_call_without_the_token_or_with_another_is_unauthenticated(registry):
    address, metrics = registry
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await list_schedules(address)
    assert missing.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert missing.value.details().startswith("no bearer token: send the metadata 'authorization: Bearer <token>'")
    for wrong in ("Bearer not-it", f"Basic {TOKEN}", TOKEN, f"Bearer {TOKEN}x"):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await list_schedules(address, (("authorization", wrong),))
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "is not this server's" in refused.value.details()
    assert (await list_schedules(address, (("authorization", f"Bearer {TOKEN}"),))).schedules == []
    assert ('sluice_grpc_server_handled_total{grpc_code="UNAUTHENTICATED",grpc_method="ListSchedules",'
            'grpc_service="sluice.v1.ScheduleRegistry"} 5.0') in metrics.render()


async def test_health_checks_need_no_token(registry):
    address, _ = registry
    async with grpc.aio.insecure_channel(address) as channel:
        response = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="sluice.v1.ScheduleRegistry"), timeout=10)
    assert response.status == health_pb2.HealthCheckResponse.SERVING


async def test_the_client_sends_its_token(registry):
    address, _ = registry
    def listed(token: str | None) -> list:
        with SluiceClient(address, token=token) as client:
            return client.list_schedules()
    assert await asyncio.to_thread(listed, TOKEN) == []
    with pytest.raises(grpc.RpcError) as refused:
        await asyncio.to_thread(listed, "")
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key (openssl), as a CA the client trusts."""
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return cert, key


def test_a_served_registry_speaks_tls_and_asks_the_cli_for_its_token(tmp_path, certificate, capsys):
    cert, key = certificate
    env = {"SLUICE_GRPC_TOKEN": TOKEN, "SLUICE_TLS_CERT": str(cert), "SLUICE_TLS_KEY": str(key)}
    with LocalServer(tmp_path / "data", command=("serve", "registry"), env=env) as server:
        over_tls = ["--server", server.address, "--tls-ca", str(cert)]
        assert main([*over_tls, "--token", TOKEN, "schedules", "list"]) == 0

        capsys.readouterr()
        assert main([*over_tls, "--token", "wrong", "schedules", "list"]) == 1
        assert capsys.readouterr().err.startswith("sluice: error: UNAUTHENTICATED: the bearer token in 'authorization'")

        assert main(["--server", server.address, "--token", TOKEN, "schedules", "list"]) == 3  # plaintext
        assert "cannot reach Sluice" in capsys.readouterr().err

        with SluiceClient(server.address, token=TOKEN, tls_ca=cert) as client:
            client.wait_ready(10)
            assert client.list_schedules() == []


@pytest.fixture(scope="module")
def authority(tmp_path_factory) -> dict[str, Path]:
    """A CA, and a server certificate for 127.0.0.1 and a client certificate it signed (openssl)."""
    where = tmp_path_factory.mktemp("ca")
    files = {name: where / f"{name}.pem" for name in ("ca", "ca_key", "server", "server_key", "client", "client_key")}

    def openssl(*args: object) -> None:
        subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)
    new_key = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl("req", "-x509", *new_key, "-keyout", files["ca_key"], "-out", files["ca"], "-days", "1",
            "-subj", "/CN=sluice test CA")
    for name, extension in (("server", "subjectAltName=IP:127.0.0.1"), ("client", "extendedKeyUsage=clientAuth")):
        request, extensions = where / f"{name}.csr", where / f"{name}.ext"
        extensions.write_text(extension + "\n")
        openssl("req", "-new", *new_key, "-keyout", files[f"{name}_key"], "-out", request, "-subj", f"/CN={name}")
        openssl("x509", "-req", "-in", request, "-CA", files["ca"], "-CAkey", files["ca_key"], "-CAcreateserial",
                "-out", files[name], "-days", "1", "-extfile", extensions)
    return files


def test_with_a_client_ca_only_callers_with_a_certificate_it_signed_get_in(tmp_path, authority, certificate):
    env = {"SLUICE_TLS_CERT": str(authority["server"]), "SLUICE_TLS_KEY": str(authority["server_key"]),
           "SLUICE_TLS_CLIENT_CA": str(authority["ca"])}
    with LocalServer(tmp_path / "data", command=("serve", "registry"), env=env) as server:
        over_tls = ["--server", server.address, "--tls-ca", str(authority["ca"])]
        signed = ["--client-cert", str(authority["client"]), "--client-key", str(authority["client_key"])]
        assert main([*over_tls, *signed, "schedules", "list"]) == 0
        assert main([*over_tls, "schedules", "list"]) == 3  # no client certificate: no connection
        self_signed, its_key = certificate
        assert main([*over_tls, "--client-cert", str(self_signed), "--client-key", str(its_key), "schedules", "list"]) == 3
        with SluiceClient(server.address, tls_ca=authority["ca"], client_cert=authority["client"],
                          client_key=authority["client_key"]) as client:
            assert client.list_schedules() == []


def test_the_cli_names_an_unreadable_ca_file(tmp_path, capsys):
    assert main(["--tls-ca", str(tmp_path / "gone.pem"), "schedules", "list"]) == 2
    assert capsys.readouterr().err == f"sluice: error: cannot read {tmp_path / 'gone.pem'}: No such file or directory\n"


def test_serve_refuses_half_a_tls_configuration_in_one_line(tmp_path, certificate):
    cert, _ = certificate
    served = subprocess.run([sys.executable, "-m", "sluice_services.cli", "serve", "registry", "--data-dir", str(tmp_path), "--port", "0",
                             "--tls-cert", str(cert)], capture_output=True, text=True, timeout=60)
    assert served.returncode == 2
    assert served.stderr == "sluice: error: tls_cert, tls_key: give both (the certificate and its private key) or neither\n"


@pytest.mark.parametrize("host, warned", [("0.0.0.0", True), ("10.1.2.3", True), ("sluice.internal", True),
                                          ("127.0.0.1", False), ("::1", False), ("localhost", False)])
def test_a_token_over_plaintext_beyond_loopback_is_warned_about(caplog, host, warned, certificate):
    GrpcSecurity(TOKEN).warn_if_exposed(host)
    GrpcSecurity(TOKEN, *certificate).warn_if_exposed(host)  # over TLS: nothing to say
    GrpcSecurity().warn_if_exposed(host)  # no token: nothing to leak
    assert [r.getMessage() for r in caplog.records] == (
        [f"gRPC on {host} takes a bearer token over plaintext: serve TLS (--tls-cert, --tls-key) when other machines"
         " reach it"] if warned else [])
