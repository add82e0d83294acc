"""Ids derived from what they identify."""
from __future__ import annotations

import uuid

from sluice.ids import derived_id


def test_derived_ids_are_uuid5_of_the_parts():
    for parts in [("a",), ("job", "s1", "12"), ("run", "ünï")]:
        assert derived_id(*parts) == str(uuid.uuid5(uuid.NAMESPACE_URL, "sluice:" + "/".join(parts)))

