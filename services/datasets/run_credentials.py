"""Per-run credentials: what a launched program presents to the datasets service's Partitions API
instead of any secret of the servers.

    credentials = RunCredentials(load_secret(data_dir), access.get)
    token = credentials.issue(run_id)                 # OpenRun's answer: into the run's context.json
    principal = credentials.authenticate(token, None)  # Principal("run:<run id>", (Grant(PROGRAM, ...), ...))

The datasets service both issues and verifies them: the launcher opens a run's access (OpenRun, with the
grants it computed from the run) and hands the token it gets to the program; the key never leaves the
datasets service. A token is `sluice-run.<run id>.<hex HMAC-SHA256(secret, run id)>`: stateless, so a
program keeps working across restarts, and datasets services sharing the key (the data dir's key file,
or --run-credential-secret) verify it. The HMAC is compared in constant time; then the run's access
decides: closed (the run published or released) or never opened is refused. Its grants are the ones
the launcher opened it with: PROGRAM on its program's namespace ("*") and on the datasets its
triggering notifications name in other namespaces."""
from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from pathlib import Path
from typing import Callable

from sluice.domain.datasets.run_access import RunAccess
from sluice.runtime.access import Grant, Principal, Role

PREFIX = "sluice-run"
SECRET_FILE = "run-credentials.key"
"""In the data dir, mode 0600: the key every datasets service sharing the data dir signs run tokens with."""
SECRET_ENV = "SLUICE_RUN_CREDENTIAL_SECRET"
PRINCIPAL_PREFIX = "run:"
_RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
_DIGEST = re.compile(r"^[0-9a-f]{64}$")


def run_of(principal: Principal | None) -> str | None:
    """The run id of a run credential's principal; None for any other caller."""
    if principal is None or not principal.name.startswith(PRINCIPAL_PREFIX):
        return None
    return principal.name.removeprefix(PRINCIPAL_PREFIX)


def load_secret(data_dir: Path, given: str = "") -> bytes:
    """`given` (the operator's --run-credential-secret), else the data dir's key file, created with
    32 random bytes (mode 0600) the first time."""
    if given:
        return given.encode()
    path = Path(data_dir) / SECRET_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        key = path.read_text(encoding="ascii").strip()
        if not key:
            raise ValueError(f"{path}: empty run credential key (delete it to make a new one)") from None
        return key.encode()
    key = secrets.token_hex(32)
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(key + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    return key.encode()


class RunCredentials:
    """The run credential authenticator (sluice.runtime.access.Authenticator) and issuer.

    `access`: a run's access by run id (None: never opened); `compare`: the constant-time comparison
    (injected so a test can see it is the one used)."""

    def __init__(self, secret: bytes, access: Callable[[str], RunAccess | None],
                 compare: Callable[[bytes, bytes], bool] = hmac.compare_digest) -> None:
        if not secret:
            raise ValueError("a run credential secret must not be empty")
        self._secret = secret
        self._access = access
        self._compare = compare

    def issue(self, run_id: str) -> str:
        if not _RUN_ID.match(run_id):
            raise ValueError(f"run id {run_id!r}: cannot carry a credential")
        return f"{PREFIX}.{run_id}.{self._digest(run_id)}"

    def authenticate(self, bearer: str | None, peer_subject: str | None) -> Principal | None:
        run_id = self.verified_run(bearer)
        if run_id is None:
            return None
        access = self._access(run_id)
        if access is None or not access.open:
            return None  # ended: its credential ends with it
        return Principal(f"{PRINCIPAL_PREFIX}{run_id}", tuple(
            Grant(Role.PROGRAM, grant.namespace, frozenset(grant.datasets)) for grant in access.grants))

    def verified_run(self, bearer: str | None) -> str | None:
        """The run id of a well-formed token whose signature is this secret's, else None."""
        if not bearer:
            return None
        token = bearer.removeprefix("Bearer ").strip()
        prefix, _, rest = token.partition(".")
        run_id, _, digest = rest.rpartition(".")
        if prefix != PREFIX or not _RUN_ID.match(run_id) or not _DIGEST.match(digest):
            return None
        if not self._compare(digest.encode(), self._digest(run_id).encode()):
            return None
        return run_id

    def _digest(self, run_id: str) -> str:
        return hmac.new(self._secret, run_id.encode(), hashlib.sha256).hexdigest()
