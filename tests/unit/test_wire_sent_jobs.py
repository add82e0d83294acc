"""SentJobs: a message is taken once by each reader, then dropped; the oldest go first past the bound."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from sluice.domain.common import ProgramRef
from sluice.domain.jobs import Job, TriggerContext
from sluice.wire.sent_jobs import KEPT_BYTES, SentJobs

T0 = datetime(2026, 11, 28, 12, 30, tzinfo=timezone.utc)


def job(number: int) -> Job:
    return Job(f"j-{number}", "s-1", 1, ProgramRef("ns", "app", "prog"), TriggerContext("s-1", "nightly"), T0)


def test_each_reader_takes_a_message_once():
    sent = SentJobs(readers=2)
    sent.sent(b"m-1", job(1))
    first, second = sent.taken(b"m-1"), sent.taken(bytes(bytearray(b"m-1")))  # equal bytes, another object
    assert first is second and first == job(1)
    assert sent.taken(b"m-1") is None and len(sent) == 0
    assert sent.taken(b"never sent") is None


def test_the_oldest_messages_go_first_past_the_bound():
    sent = SentJobs(readers=1, kept=2)
    for number in range(3):
        sent.sent(f"m-{number}".encode(), job(number))
    assert len(sent) == 2
    assert sent.taken(b"m-0") is None
    assert sent.taken(b"m-1") == job(1) and sent.taken(b"m-2") == job(2)


def test_the_same_message_sent_again_waits_for_every_reader_again():
    sent = SentJobs(readers=2)
    sent.sent(b"m-1", job(1))
    sent.taken(b"m-1")
    sent.sent(b"m-1", job(1))
    assert sent.taken(b"m-1") == job(1) and sent.taken(b"m-1") == job(1) and sent.taken(b"m-1") is None


def test_no_readers_is_refused():
    with pytest.raises(ValueError, match="readers"):
        SentJobs(readers=0)


def test_a_message_too_large_to_keep_is_parsed_instead():
    sent = SentJobs(readers=1)
    sent.sent(b"m" * (KEPT_BYTES + 1), job(1))
    assert len(sent) == 0 and sent.taken(b"m" * (KEPT_BYTES + 1)) is None
