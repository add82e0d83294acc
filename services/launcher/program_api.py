"""What a launched program is told in context.json `system.api`: how to reach the launcher's
Partitions API, and the run's own credential.

    api = ProgramApi(credentials, settings.host, tls_ca=settings.grpc_security.tls_cert)
    spec.on_listening = api.listening          # the gRPC server's bound port, before any launch
    context["system"].update(api.context_for(run_id))
    # {"api": {"address": "127.0.0.1:50051", "token": "sluice-run.<run id>.<hmac>", "tls_ca": ...}}
"""
from __future__ import annotations

import ipaddress
from pathlib import Path

from sluice_services.launcher.run_credentials import RunCredentials

UNSPECIFIED = ("", "0.0.0.0", "::", "localhost")


def program_host(host: str) -> str:
    """The address a program on the launcher's machine reaches a server bound to `host` at: loopback
    for an unspecified bind, the bound address otherwise (a server bound to 127.0.0.2 does not
    answer on 127.0.0.1)."""
    if host in UNSPECIFIED:
        return "127.0.0.1"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host   # a host name
    return f"[{host}]" if address.version == 6 else host


class ProgramApi:
    """`tls_ca`: the certificate (chain) file the server presents, when it speaks TLS: the program
    trusts it (a self-signed certificate, or a chain file that ends with its CA's)."""

    def __init__(self, credentials: RunCredentials, host: str, tls_ca: Path | None = None) -> None:
        self._credentials = credentials
        self._host = program_host(host)
        self._tls_ca = tls_ca
        self._port: int | None = None

    def listening(self, port: int) -> None:
        self._port = port

    def context_for(self, run_id: str) -> dict:
        if self._port is None:
            raise RuntimeError("the launcher's gRPC server is not listening yet: no address to give a program")
        api = {"address": f"{self._host}:{self._port}", "token": self._credentials.issue(run_id)}
        if self._tls_ca is not None:
            api["tls_ca"] = str(Path(self._tls_ca).resolve())
        return {"api": api}
