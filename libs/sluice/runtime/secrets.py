"""Secrets never printed: URLs with their password masked, tokens shown by their kind only.

    mask_url("postgresql://sluice:hunter2@db:5432/sluice")  # 'postgresql://sluice:***@db:5432/sluice'
    mask_url("kafka://h:9092?sasl_password=x")               # 'kafka://h:9092?sasl_password=***'

Every log line, error message and ready line that shows a URL (event log, bus, OpenLineage backend)
goes through mask_url; a bearer token is never shown at all."""
from __future__ import annotations

import re

MASK = "***"
SECRET_PARAMETERS = re.compile(r"(pass|secret|token|key|credential|auth)", re.IGNORECASE)
"""A query parameter whose name contains one of these holds a secret (password=, sasl_password=,
api_key=, access_token=, ...)."""

_USERINFO = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^:@/?#]*)(?P<password>:[^/?#]*)?@")
_PARAMETER = re.compile(r"(?P<sep>[?&;])(?P<name>[^=&;#]+)=(?P<value>[^&;#]*)")


def mask_url(url: str) -> str:
    """`url` with the password of its user info and the values of secret-named query parameters
    replaced by ***; anything that is not a URL with those parts comes back unchanged."""
    if not url:
        return url
    masked = _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}{':' + MASK if m['password'] else ''}@", url, count=1)
    if "?" not in masked:
        return masked
    base, _, rest = masked.partition("?")
    rest = _PARAMETER.sub(lambda m: f"{m['sep']}{m['name']}={MASK}" if SECRET_PARAMETERS.search(m["name"])
                          else m[0], "?" + rest)
    return base + rest


def mask_text(text: str, *urls: str) -> str:
    """`text` (a driver's error message, which may quote what it was given) with each of `urls`
    masked, and its password alone too, wherever it appears."""
    for url in (u for u in urls if u):
        text = text.replace(url, mask_url(url))
        match = _USERINFO.match(url)
        if match and match["password"] and len(match["password"]) > 1:
            text = text.replace(match["password"][1:], MASK)
    return text
