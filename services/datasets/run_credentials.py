"""Per-run credentials: what a launched program presents to the datasets service's Partitions API
instead of any secret of the servers.

    credentials = RunCredentials(load_secret(data_dir), access.get)
    token = credentials.issue(run_id, attempt)        # OpenRun's answer: into the attempt's context.json
    principal = credentials.authenticate(token, None)  # Principal("run:<run id>", (Grant(PROGRAM, ...), ...))

The datasets service both issues and verifies them: the launcher opens a run's access for an attempt
(OpenRun, with the grants it computed from the run) and hands the token it gets to the program; the key
never leaves the datasets service. A token is `sluice-run.<run id>.<attempt>.<hex HMAC-SHA256(secret,
"<run id>.<attempt>")>`: stateless, so a program keeps working across restarts, and datasets services
sharing the key (the data dir's key file, or --run-credential-secret) verify it. The HMAC is compared in
constant time; then the run's access decides: closed (the attempt published or was released), never
opened, or opened since for another attempt (a retry: the attempt before it may still be running on the
host of a launcher that lost its lease) is refused, and `refusal` says which. Its grants are the ones
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
_ATTEMPT = re.compile(r"0|[1-9][0-9]{0,9}")
"""fullmatch: one spelling per attempt (no sign, no leading zero, no trailing newline)."""


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

    def issue(self, run_id: str, attempt: int = 0) -> str:
        """The credential of the run's `attempt` (0: an access opened naming no attempt)."""
        if not _RUN_ID.match(run_id):
            raise ValueError(f"run id {run_id!r}: cannot carry a credential")
        if not _ATTEMPT.fullmatch(str(attempt)):
            raise ValueError(f"attempt {attempt!r}: cannot carry a credential")
        return f"{PREFIX}.{run_id}.{attempt}.{self._digest(run_id, attempt)}"

    def authenticate(self, bearer: str | None, peer_subject: str | None) -> Principal | None:
        verified = self.verified(bearer)
        if verified is None:
            return None
        access = self._access(verified[0])
        if _refused(access, *verified) is not None:
            return None
        return Principal(f"{PRINCIPAL_PREFIX}{access.run_id}", tuple(
            Grant(Role.PROGRAM, grant.namespace, frozenset(grant.datasets)) for grant in access.grants))

    def refusal(self, bearer: str | None) -> str | None:
        """Why `authenticate` refuses a token this secret signed (for the caller's UNAUTHENTICATED message);
        None for a token it accepts or did not sign (which learns nothing of any run)."""
        verified = self.verified(bearer)
        return _refused(self._access(verified[0]), *verified) if verified is not None else None

    def verified(self, bearer: str | None) -> tuple[str, int | None] | None:
        """The run id and attempt (None: a token issued before credentials named their attempt) of a
        well-formed token whose signature is this secret's, else None."""
        if not bearer:
            return None
        parts = bearer.removeprefix("Bearer ").strip().split(".")
        if len(parts) == 3:
            (prefix, run_id, digest), attempt = parts, None
        elif len(parts) == 4 and _ATTEMPT.fullmatch(parts[2]):
            prefix, run_id, digest, attempt = parts[0], parts[1], parts[3], int(parts[2])
        else:
            return None
        if prefix != PREFIX or not _RUN_ID.match(run_id) or not _DIGEST.match(digest):
            return None
        if not self._compare(digest.encode(), self._digest(run_id, attempt).encode()):
            return None
        return run_id, attempt

    def _digest(self, run_id: str, attempt: int | None) -> str:
        # a run id holds no ".": "<run id>.<attempt>" is never another token's run id alone
        signed = run_id if attempt is None else f"{run_id}.{attempt}"
        return hmac.new(self._secret, signed.encode(), hashlib.sha256).hexdigest()


def _refused(access: RunAccess | None, run_id: str, attempt: int | None) -> str | None:
    """Why the credential of `attempt` of run `run_id` is refused with the run's access as it is; None: honoured."""
    if access is None:
        return f"run {run_id}: its access was never opened"
    if attempt is None and access.attempt:
        # Issued before credentials named their attempt, it may be any attempt's: honoured only by an access that
        # records no attempt either (a run in flight when the datasets service was upgraded, or opened by a
        # launcher that names none), whose attempts the service cannot tell apart anyway.
        return f"run {run_id}: this credential names no attempt, and attempt {access.attempt} is the run's current one"
    if attempt is not None and attempt != access.attempt:
        return f"run {run_id}: this credential is attempt {attempt}'s, and attempt {access.attempt} is the run's current one"
    if not access.open:
        whose = f"attempt {access.attempt}'s access" if access.attempt else "its access"
        how = "its outputs were published" if access.published else "what it took was released"
        return f"run {run_id}: {whose} has ended ({how}): its credential ended with it"
    return None
