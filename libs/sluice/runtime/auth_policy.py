"""Authenticators: the policy file (principals by hashed token or mTLS subject, with their grants)
and a single server token (`--grpc-token`: admin on every namespace).

The policy file (TOML, `--auth-policy FILE`):

    [[principal]]
    name = "alice"                          # shown as token:alice
    token_sha256 = "9f86d08...15b0f00a08"   # sha256 hex of the token (`sluice auth hash-token`)
    grants = [
      { role = "operator", namespace = "experiments" },
      { role = "producer", namespace = "clickstream", datasets = ["events"] },
    ]

    [[principal]]
    name = "ingest"                         # shown as mtls:CN=ingest
    mtls_subject = "CN=ingest"              # the client certificate's subject
    grants = [{ role = "reader", namespace = "*" }]

Tokens are stored only as their SHA-256 and compared in constant time (hmac.compare_digest), every
principal's hash each time, so neither the file nor the comparison's timing gives a token away."""
from __future__ import annotations

import hashlib
import hmac
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from sluice.runtime.access import ANY_NAMESPACE, Grant, Principal, Role

_KEYS = {"name", "token_sha256", "mtls_subject", "grants"}
_GRANT_KEYS = {"role", "namespace", "datasets"}


class PolicyError(ValueError):
    """A policy file that cannot be used; the message is one line naming the entry and key."""


def hash_token(token: str) -> str:
    """The hex SHA-256 of a token, as the policy file stores it."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


Compare = Callable[[bytes, bytes], bool]
"""Equality of two secrets' hashes: hmac.compare_digest (constant time); injected only by tests."""


def same_secret(presented: str | bytes, expected: str | bytes, compare: Compare = hmac.compare_digest) -> bool:
    """Constant-time equality of two secrets (or of their hashes)."""
    as_bytes = [value.encode("utf-8") if isinstance(value, str) else value for value in (presented, expected)]
    return compare(as_bytes[0], as_bytes[1])


@dataclass(frozen=True)
class _Entry:
    principal: Principal
    token_sha256: str = ""
    mtls_subject: str = ""


class PolicyAuthenticator:
    """The principals of a policy file."""

    def __init__(self, entries: tuple[_Entry, ...], compare: Compare = hmac.compare_digest) -> None:
        self._entries = entries
        self._compare = compare

    def authenticate(self, bearer: str | None, peer_subject: str | None) -> Principal | None:
        if bearer is not None:
            presented = hash_token(bearer)
            found = None
            for entry in self._entries:  # every hash compared: the time taken does not say which matched
                if entry.token_sha256 and same_secret(presented, entry.token_sha256, self._compare) and found is None:
                    found = entry.principal
            return found
        if peer_subject:
            return next((e.principal for e in self._entries if e.mtls_subject and e.mtls_subject == peer_subject), None)
        return None

    @property
    def principals(self) -> tuple[Principal, ...]:
        return tuple(entry.principal for entry in self._entries)


class TokenAuthenticator:
    """One shared bearer token (`--grpc-token`, `--lineage-token`): one principal, compared in constant time."""

    def __init__(self, token: str, principal: Principal, compare: Compare = hmac.compare_digest) -> None:
        self._hash = hash_token(token)
        self._principal = principal
        self._compare = compare

    def authenticate(self, bearer: str | None, peer_subject: str | None) -> Principal | None:
        if bearer is not None and same_secret(hash_token(bearer), self._hash, self._compare):
            return self._principal
        return None


def server_token(token: str) -> TokenAuthenticator:
    """The server's `--grpc-token`: admin on every namespace, as it was before roles."""
    return TokenAuthenticator(token, Principal("token:server", (Grant(Role.ADMIN, ANY_NAMESPACE),)))


def load_policy(path: Path) -> PolicyAuthenticator:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise PolicyError(f"{path}: cannot read the policy file: {getattr(error, 'strerror', None) or error}") from None
    return parse_policy(text, str(path))


def parse_policy(text: str, where: str = "<policy>", compare: Compare = hmac.compare_digest) -> PolicyAuthenticator:
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise PolicyError(f"{where}: invalid TOML: {error}") from None
    unknown = set(document) - {"principal"}
    if unknown:
        raise PolicyError(f"{where}: {sorted(unknown)[0]}: unknown key (expected [[principal]] tables)")
    entries = document.get("principal", [])
    if not isinstance(entries, list):
        raise PolicyError(f"{where}: principal: must be an array of tables ([[principal]])")
    parsed = tuple(_entry(entry, f"{where}: principal[{i}]") for i, entry in enumerate(entries))
    names = [entry.principal.name for entry in parsed]
    duplicate = next((name for name in names if names.count(name) > 1), None)
    if duplicate:
        raise PolicyError(f"{where}: {duplicate}: two principals have this name")
    return PolicyAuthenticator(parsed, compare)


def _entry(table: Any, where: str) -> _Entry:
    if not isinstance(table, dict):
        raise PolicyError(f"{where}: must be a table")
    unknown = set(table) - _KEYS
    if unknown:
        raise PolicyError(f"{where}.{sorted(unknown)[0]}: unknown key (known: {', '.join(sorted(_KEYS))})")
    name = table.get("name")
    if not isinstance(name, str) or not name:
        raise PolicyError(f"{where}.name: a non-empty string is required")
    token, subject = table.get("token_sha256", ""), table.get("mtls_subject", "")
    if not isinstance(token, str) or not isinstance(subject, str) or bool(token) == bool(subject):
        raise PolicyError(f"{where}: give exactly one of token_sha256 and mtls_subject (strings)")
    if token and (len(token) != 64 or any(c not in "0123456789abcdef" for c in token.lower())):
        raise PolicyError(f"{where}.token_sha256: 64 hex digits are required (sluice auth hash-token < token-file)")
    grants = table.get("grants", [])
    if not isinstance(grants, list):
        raise PolicyError(f"{where}.grants: must be an array of tables")
    kind = "token" if token else "mtls"
    label = f"{kind}:{name}" if token else f"mtls:{subject}"
    principal = Principal(label, tuple(_grant(g, f"{where}.grants[{i}]") for i, g in enumerate(grants)))
    return _Entry(principal, token.lower(), subject)


def _grant(table: Any, where: str) -> Grant:
    if not isinstance(table, dict):
        raise PolicyError(f"{where}: must be a table")
    unknown = set(table) - _GRANT_KEYS
    if unknown:
        raise PolicyError(f"{where}.{sorted(unknown)[0]}: unknown key (known: {', '.join(sorted(_GRANT_KEYS))})")
    roles = {role.value: role for role in Role}
    role = roles.get(table.get("role"))
    if role is None:
        raise PolicyError(f"{where}.role: one of {', '.join(roles)} is required, got {table.get('role')!r}")
    namespace = table.get("namespace")
    if not isinstance(namespace, str) or not namespace:
        raise PolicyError(f"{where}.namespace: a namespace or \"*\" is required")
    datasets = table.get("datasets", [])
    if not isinstance(datasets, list) or not all(isinstance(d, str) and d for d in datasets):
        raise PolicyError(f"{where}.datasets: must be an array of dataset names")
    if role in (Role.PRODUCER, Role.PROGRAM) and not datasets:
        raise PolicyError(f"{where}.datasets: a {role.value} grant names its datasets (\"*\": all of the namespace)")
    return Grant(role, namespace, frozenset(datasets))
