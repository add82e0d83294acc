"""What a launched program is told in context.json `system.api`: how to reach the datasets service's
Partitions API, and the run's own credential (the datasets service issues it when the launcher opens
the run's access).

    api = ProgramApi(run_data, tls_ca=settings.grpc_security.tls_cert)
    context["system"].update(await api.context_for(run))
    # {"api": {"address": "datasets:50051", "token": "sluice-run.<run id>.<attempt>.<hmac>", "tls_ca": ...}}
"""
from __future__ import annotations

import ipaddress
from pathlib import Path

from sluice.domain.runs import Run
from sluice_services.launcher.run_data import RunData, run_grants

UNSPECIFIED = ("", "0.0.0.0", "::", "localhost")


def program_host(host: str) -> str:
    """The address a program on this machine reaches a server bound to `host` at: loopback
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
    """`tls_ca`: the certificate (chain) file the datasets service presents, when it speaks TLS: the
    program trusts it (a self-signed certificate, or a chain file that ends with its CA's)."""

    def __init__(self, run_data: RunData, tls_ca: Path | None = None) -> None:
        self._run_data = run_data
        self._tls_ca = tls_ca

    async def context_for(self, run: Run) -> dict:
        api = {"address": self._run_data.address(),
               "token": await self._run_data.open_run(run.id, run_grants(run), run.attempt.number)}
        if self._tls_ca is not None:
            api["tls_ca"] = str(Path(self._tls_ca).resolve())
        return {"api": api}
