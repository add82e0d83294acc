"""A refusal's message stays within what every gRPC client takes as a status, percent-encoded (8 KiB of
metadata: past it, at random, the client reports RESOURCE_EXHAUSTED "Stream removed" and no field)."""
from __future__ import annotations

from urllib.parse import quote

import pytest

from sluice.runtime.grpc_server import MAX_DETAILS_BYTES, MAX_DETAILS_CHARS, status_details

FIELD = "schedule.constraints[0].time_window.start: not a time of day "


def encoded(text: str) -> int:
    """The size gRPC sends: printable ASCII but `%` as it is, every other byte as %XX."""
    return len(quote(text, safe="".join(chr(c) for c in range(0x20, 0x7F) if chr(c) != "%")))


@pytest.mark.parametrize("value", ["x" * 100_000, "\u20ac" * 100_000, "\U0001F600" * 100_000, "\x00" * 100_000,
                                   "%" * 100_000, "ab\u20ac" * 50_000, "\udcff" * 10_000])
def test_a_long_value_is_cut_to_what_a_client_takes(value):
    details = status_details(FIELD + value)
    assert details.startswith(FIELD) and details.endswith(f"... ({len(FIELD + value)} characters)")
    assert encoded(details.encode(errors="replace").decode()) <= MAX_DETAILS_BYTES + 64
    assert len(details) <= MAX_DETAILS_CHARS + 64


def test_a_short_message_is_sent_whole():
    assert status_details(FIELD + "\u20ac" * 10) == FIELD + "\u20ac" * 10
