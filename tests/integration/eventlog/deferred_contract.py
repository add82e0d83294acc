"""The contract of deferred appends (sluice.eventlog.deferred) every adapter that defers passes:
committed at once, made durable together later, and served to subscribers only once durable.

An adapter's test module subclasses DeferredAppendsContract (not collected: no Test prefix), gives a
`log` fixture of a log that defers, and says how many group flushes (fsyncs) it ran so far:

    class TestMyDeferredAppends(DeferredAppendsContract):
        @pytest.fixture
        def log(self, ...): ...

        def flushes(self, log) -> int: ...
"""
from __future__ import annotations

import asyncio

import pytest

from sluice.eventlog.deferred import current, deferring
from sluice.eventlog.port import ANY_VERSION, NO_STREAM, Checkpoint, EventLog, NewEvent, WrongExpectedVersion

NEVER = 3600.0
"""A poll interval no test waits out: whatever a subscriber gets, a wake or a read brought it."""


def event(name: str) -> NewEvent:
    return NewEvent(name, "Happened", b"{}")


async def served(subscription, wait: float = 0.3) -> list[str]:
    """The ids a subscription is served within `wait` seconds."""
    ids: list[str] = []

    async def take() -> None:
        async for batch in subscription:
            ids.extend(e.id for e in batch)
    task = asyncio.create_task(take())
    await asyncio.sleep(wait)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return ids


class DeferredAppendsContract:
    def flushes(self, log: EventLog) -> int:
        raise NotImplementedError

    async def test_a_deferred_append_is_committed_at_once_and_served_to_subscribers_once_durable(self, log):
        following = log.subscribe_batches(0)
        first = asyncio.ensure_future(following.__anext__())
        await asyncio.sleep(0.05)
        with deferring() as appends:
            assert log.append("s", [event("a")], NO_STREAM, checkpoints=[Checkpoint("consumed", 7)]) == 0
            assert log.append("s", [event("b")], 0) == 1
            with pytest.raises(WrongExpectedVersion):  # versions are checked against what committed
                log.append("s", [event("c")], 0)
        assert [e.id for e in log.read_stream("s")] == ["a", "b"] and log.read_checkpoint("consumed") == 7
        await asyncio.sleep(0.1)
        assert not first.done()  # not durable yet: held back
        await appends.durable()
        assert [e.id for e in await asyncio.wait_for(first, 1.0)] == ["a", "b"]
        assert self.flushes(log) == 1  # one for both commits
        await following.aclose()

    async def test_a_durable_commit_after_deferred_ones_hands_them_all_over_in_order(self, log):
        following = log.subscribe_batches(0)
        with deferring():
            log.append("s", [event("a")], NO_STREAM)
        log.append("t", [event("b")], NO_STREAM)  # a durable commit: its flush covers the deferred one
        assert await served(following) == ["a", "b"]
        assert self.flushes(log) == 0

    async def test_a_subscriber_reading_the_store_stops_before_an_append_not_durable_yet(self, log):
        log.append("s", [event("a")], NO_STREAM)
        with deferring() as appends:
            log.append("s", [event("b")], 0)
        log.append("s", [], ANY_VERSION)  # commits nothing: no flush, nothing made durable
        assert await served(log.subscribe_batches(0)) == ["a"]
        assert await served(log.subscribe_batches(0, prefixes=("s",))) == ["a"]
        await appends.durable()
        assert await served(log.subscribe_batches(0)) == ["a", "b"]

    async def test_appends_outside_a_deferring_block_or_after_it_ended_are_durable_at_once(self, log):
        with deferring(enabled=False):
            assert current() is None
            log.append("s", [event("a")], NO_STREAM)
        with deferring() as appends:
            pass
        assert current() is None
        log.append("s", [event("b")], 0)
        await appends.durable()  # nothing deferred: nothing to wait for
        assert self.flushes(log) == 0 and log.commits_held_back == 0
