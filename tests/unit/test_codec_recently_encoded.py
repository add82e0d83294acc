"""Events this process just encoded decode to the same objects (no JSON parse) when the recorded data
is what it encoded; anything else is decoded from its data."""
from dataclasses import dataclass
from datetime import datetime, timezone

from sluice.eventlog import codec
from sluice.eventlog.codec import EventTypes, encode
from sluice.eventlog.port import RecordedEvent

T0 = datetime(2026, 11, 23, tzinfo=timezone.utc)


@dataclass(frozen=True)
class Counted:
    name: str
    count: int


TYPES = EventTypes([Counted])


def recorded(event_id: str, data: bytes) -> RecordedEvent:
    return RecordedEvent(event_id, "s", 0, 1, "Counted", data, {}, T0)


def test_a_just_encoded_event_decodes_to_itself():
    event = Counted("a", 1)
    assert TYPES.decode(recorded("id-1", encode(event, "id-1").data)) is event


def test_another_writers_event_under_the_same_id_is_decoded_from_its_data():
    encode(Counted("mine", 1), "id-2")  # this writer lost the conflict; the winner committed its own event
    theirs = encode(Counted("theirs", 2), "elsewhere").data
    assert TYPES.decode(recorded("id-2", theirs)) == Counted("theirs", 2)


def test_an_event_encoded_long_ago_is_decoded_from_its_data():
    event = Counted("old", 3)
    data = encode(event, "id-3").data
    for index in range(codec._RECENTLY_ENCODED_MAX):
        encode(Counted("filler", index), f"filler-{index}")
    decoded = TYPES.decode(recorded("id-3", data))
    assert decoded == event and decoded is not event


def test_a_large_event_is_not_kept():
    event = Counted("x" * codec._RECENTLY_ENCODED_BYTES, 4)
    data = encode(event, "id-4").data
    assert "id-4" not in codec._recently_encoded
    assert TYPES.decode(recorded("id-4", data)) == event
