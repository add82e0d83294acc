"""Ids are derived from what they identify, so a replayed log produces the same ids."""
from __future__ import annotations

import hashlib
import uuid


_NAMESPACE = uuid.NAMESPACE_URL.bytes


def derived_id(*parts: str) -> str:
    """A stable id derived from other ids: the same inputs always give the same id (idempotent retries).

    It is uuid5(NAMESPACE_URL, "sluice:" + "/".join(parts)), computed without building UUID objects:
    every append derives one per event."""
    digest = bytearray(hashlib.sha1(_NAMESPACE + ("sluice:" + "/".join(parts)).encode()).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50
    digest[8] = (digest[8] & 0x3F) | 0x80
    x = digest.hex()
    return f"{x[:8]}-{x[8:12]}-{x[12:16]}-{x[16:20]}-{x[20:]}"


def run_id_for(job_id: str) -> str:
    """One run per job: a redelivered launch request maps to the same run and is ignored."""
    return derived_id("run", job_id)
