"""An event this release cannot read (corrupt, cut short, of another release, of a type it does not know)
is one error, UndecodableEvent, whose one line names the event's stream, version, position and type and
why, whatever the decoder tripped on."""
from dataclasses import dataclass
from datetime import datetime, timezone

import pytest

from sluice.eventlog.codec import EventTypes, UndecodableEvent, encode
from sluice.eventlog.port import RecordedEvent

T0 = datetime(2026, 11, 23, tzinfo=timezone.utc)


@dataclass(frozen=True)
class Counted:
    name: str
    count: int
    at: datetime


@dataclass(frozen=True)
class Named:
    name: str


@dataclass(frozen=True)
class Either:
    which: Counted | Named


TYPES = EventTypes([Counted])
WHERE = "stream counter-7 version 4 at position 31: "


def recorded(data: bytes, type_: str = "Counted") -> RecordedEvent:
    return RecordedEvent("e-1", "counter-7", 4, 31, type_, data, {}, T0)


@pytest.mark.parametrize("data, why", [
    (b"{not json", "Counted: JSONDecodeError: Expecting property name"),
    (b'{"name": "a", "count": 1, "at": "2026-11-23T00:00:00+00:00"', "Counted: JSONDecodeError"),
    (b'{"name": "a", "count": 1}', "Counted: TypeError: "),
    (b'{"name": "a", "count": 1, "at": "yesterday"}', "Counted: ValueError: Invalid isoformat string: 'yesterday'"),
    (b'{"name": "a", "count": 1, "at": 5}', "Counted: TypeError: "),
    (b"[1, 2, 3]", "Counted: "),
    (b'{"name": "\xff", "count": 1}', "Counted: UnicodeDecodeError"),
    (b"[" * 100_000 + b"]" * 100_000, "Counted: RecursionError"),
])
def test_a_corrupt_or_foreign_event_is_named_with_the_cause(data, why):
    with pytest.raises(UndecodableEvent) as caught:
        TYPES.decode(recorded(data))
    message = str(caught.value)
    assert message.startswith(WHERE + why) and "\n" not in message
    assert caught.value.__cause__ is not None


def test_an_event_of_a_type_this_release_does_not_know_is_named():
    with pytest.raises(UndecodableEvent, match=f"^{WHERE}CountedTwice: a type this release does not know$"):
        TYPES.decode(recorded(b"{}", "CountedTwice"))


def test_the_cause_is_cut_short_to_keep_the_line_readable():
    either = EventTypes([Either])
    huge = b'{"which": {"unknown": "' + b"x" * 100_000 + b'"}}'
    with pytest.raises(UndecodableEvent) as caught:
        either.decode(recorded(huge, "Either"))
    message = str(caught.value)
    assert message.startswith(WHERE + "Either: ValueError: cannot decode") and len(message) < 500
    assert "characters)" in message


def test_a_cause_over_several_lines_is_one_line():
    error = UndecodableEvent(recorded(b"{}"), ValueError("event: bad\n  field: worse\r\n"))
    assert str(error) == WHERE + "Counted: ValueError: event: bad field: worse"


def test_an_event_that_decodes_is_unchanged():
    event = Counted("a", 1, T0)
    assert TYPES.decode(recorded(encode(event, "elsewhere").data)) == event
