"""The tests' waiting helpers (tests/support/waiting.py): the probe's first truthy value comes back, and a
probe that never holds fails naming what was awaited."""
from __future__ import annotations

import pytest

from tests.support.waiting import eventually, until


def counting_probe(holds_at: int):
    calls = []

    def probe():
        calls.append(1)
        return f"value {len(calls)}" if len(calls) >= holds_at else None
    return probe


def test_eventually_returns_the_first_truthy_value():
    assert eventually(counting_probe(3), timeout=30, what="the third call", interval=0) == "value 3"


def test_eventually_fails_naming_what_it_waited_for():
    with pytest.raises(AssertionError, match="timed out after 0s waiting for the moon"):
        eventually(lambda: None, timeout=0, what="the moon")


async def test_until_returns_the_first_truthy_value_and_fails_naming_what_it_waited_for():
    assert await until(counting_probe(3), "the third call", timeout=30, interval=0) == "value 3"
    with pytest.raises(AssertionError, match="timed out after 0s waiting for the sun"):
        await until(lambda: 0, "the sun", timeout=0)
