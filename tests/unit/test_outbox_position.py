"""The relay headers the matcher takes from a notification (`lookup.outbox_position`): only the relays of
services that publish notifications, whatever a writer to the topic puts in its headers. Each name
taken becomes checkpoint names (per matches partition and source partition), so a writer spraying
names would grow the matcher's consumed positions without bound."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from sluice.bus.port import Record
from sluice.bus.topics import PARTITION_NOTIFICATIONS
from sluice.runtime.outbox import POSITION_HEADER, RELAY_HEADER
from sluice_services.catalogue import CATALOGUE, NOTIFYING_RELAYS
from sluice_services.matcher.lookup import outbox_position

SERVICES = Path(__file__).resolve().parents[2] / "services"
NOTIFICATION_TOPICS = {"PARTITION_NOTIFICATIONS", "PROGRAM_NOTIFICATIONS"}


def record(*headers: tuple[str, bytes]) -> Record:
    return Record(PARTITION_NOTIFICATIONS, 0, 0, b"k", b"", tuple(headers), 0)


@pytest.mark.parametrize("relay", NOTIFYING_RELAYS)
def test_a_notifying_relays_position_is_taken(relay):
    assert outbox_position(record((RELAY_HEADER, relay.encode()), (POSITION_HEADER, b"42"))) == (relay, 42)


@pytest.mark.parametrize("headers", [
    (),
    ((RELAY_HEADER, b"launcher"),),
    ((POSITION_HEADER, b"42"),),
    ((RELAY_HEADER, b"mallory"), (POSITION_HEADER, b"42")),
    ((RELAY_HEADER, b"registry"), (POSITION_HEADER, b"42")),  # a service, but it relays no notification
    ((RELAY_HEADER, b"launcher "), (POSITION_HEADER, b"42")),
    ((RELAY_HEADER, b"launcher"), (POSITION_HEADER, b"-1")),
    ((RELAY_HEADER, b"launcher"), (POSITION_HEADER, b"4.2")),
    ((RELAY_HEADER, b"launcher"), (POSITION_HEADER, b"9" * 19)),
    ((RELAY_HEADER, b"launcher"), (POSITION_HEADER, "４２".encode())),
], ids=["none", "no position", "no relay", "unknown relay", "not a notifying relay", "padded name",
        "negative", "not an integer", "beyond 64 bits", "unicode digits"])
def test_other_headers_are_a_producers_own_notification(headers):
    assert outbox_position(record(*headers)) == ("", 0)


@given(st.binary(max_size=80), st.binary(max_size=24))
def test_any_header_bytes_give_a_known_relay_or_none(relay, position):
    name, value = outbox_position(record((RELAY_HEADER, relay), (POSITION_HEADER, position)))
    assert (name, value) == ("", 0) or (name in NOTIFYING_RELAYS and 0 <= value < 10 ** 18)


def test_the_notifying_relays_are_the_services_whose_routes_publish_notifications():
    """Read from the source: a service that starts relaying notifications is added to NOTIFYING_RELAYS,
    or the matcher would not recognise its resends."""
    publishing = set()
    for path in SERVICES.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Outgoing" and node.args
                    and getattr(node.args[0], "id", None) in NOTIFICATION_TOPICS):
                publishing.add(path.relative_to(SERVICES).parts[0])
    modules = {service.module.split(".")[1]: service.name for service in CATALOGUE}
    assert publishing, "no route found: the scan no longer matches how routes are written"
    assert {modules[folder] for folder in publishing} == set(NOTIFYING_RELAYS)
