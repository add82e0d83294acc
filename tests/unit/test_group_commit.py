"""GroupCommit (sluice.eventlog.group_commit) on its own, with a flush the test controls: one flush for
every caller waiting, makers checked by the flush, and a durable commit vouching only for its own maker's."""
from __future__ import annotations

import threading

import pytest

from sluice.eventlog.group_commit import GroupCommit


class Flush:
    """Records the makers of each flush; blocks in it until `go` is set; raises `failure` if set."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.entered = threading.Event()
        self.go = threading.Event()
        self.go.set()
        self.failure: Exception | None = None

    def __call__(self, makers: list[str]) -> None:
        self.calls.append(sorted(makers))
        self.entered.set()
        self.go.wait(5)
        if self.failure is not None:
            raise self.failure


def flushing(commits: GroupCommit, flush: Flush, ticket: int) -> threading.Thread:
    """A thread syncing to `ticket`, inside a flush that goes on once `flush.go` is set."""
    flush.go.clear()
    syncing = threading.Thread(target=commits.sync_to, args=(ticket,))
    syncing.start()
    assert flush.entered.wait(5)
    return syncing


def test_callers_arriving_during_a_flush_share_the_next_one():
    flush = Flush()
    commits = GroupCommit(flush)
    first = commits.committed("a", durable=False)
    syncing = flushing(commits, flush, first)
    later = [commits.committed("a", durable=False), commits.committed("b", durable=False)]
    waiting = [threading.Thread(target=commits.sync_to, args=(ticket,)) for ticket in later]
    for thread in waiting:
        thread.start()
    flush.go.set()
    for thread in [syncing, *waiting]:
        thread.join(5)
    assert flush.calls == [["a"], ["a", "b"]] and commits.flushes == 2
    assert commits.is_durable(later[-1]) and commits.sync_to(later[-1]) == later[-1]


def test_a_durable_commit_vouches_for_earlier_ones_only_when_they_were_all_its_makers():
    commits = GroupCommit(Flush())
    deferred = commits.committed("a", durable=False)
    assert not commits.is_durable(commits.committed("b", durable=True))
    assert commits.is_durable(commits.committed("a", durable=True)) and commits.is_durable(deferred)
    assert commits.flushes == 0


def test_a_durable_commit_made_while_a_flush_checks_makers_vouches_for_nothing():
    flush = Flush()
    commits = GroupCommit(flush)
    deferred = commits.committed("a", durable=False)
    syncing = flushing(commits, flush, deferred)
    assert not commits.is_durable(commits.committed("a", durable=True))
    flush.go.set()
    syncing.join(5)
    assert commits.is_durable(deferred)


def test_commits_without_makers_are_made_durable_by_any_durable_commit():
    commits = GroupCommit(Flush())
    deferred = commits.committed(durable=False)
    assert commits.is_durable(commits.committed(durable=True)) and commits.is_durable(deferred)


def test_a_failed_flush_leaves_its_makers_for_the_next_to_check():
    flush = Flush()
    commits = GroupCommit(flush)
    deferred = commits.committed("a", durable=False)
    flush.failure = OSError("gone")
    with pytest.raises(OSError):
        commits.sync_to(deferred)
    assert not commits.is_durable(deferred) and commits.flushes == 0
    assert not commits.is_durable(commits.committed("b", durable=True))  # "a" still unchecked
    flush.failure = None
    assert commits.sync_to(deferred) >= deferred and flush.calls[-1] == ["a"]
