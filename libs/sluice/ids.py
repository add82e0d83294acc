"""Ids are derived from what they identify, so a replayed log produces the same ids."""
from __future__ import annotations

import uuid


def derived_id(*parts: str) -> str:
    """A stable id derived from other ids: the same inputs always give the same id (idempotent retries)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "sluice:" + "/".join(parts)))


def run_id_for(job_id: str) -> str:
    """One run per job: a redelivered launch request maps to the same run and is ignored."""
    return derived_id("run", job_id)
