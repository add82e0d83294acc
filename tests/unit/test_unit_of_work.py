"""The one unit of work (sluice.runtime.unit_of_work): consumed records skipped, positions appended
with the events, a conflict reloaded and decided again, a moved position read again, a bound."""
from __future__ import annotations

import pytest

from sluice.bus.port import Record
from sluice.eventlog.port import Checkpoint, NewEvent, StreamAppend, WrongExpectedVersion
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.runtime.offsets import ConsumedOffsets
from sluice.runtime.unit_of_work import MAX_CONFLICT_RETRIES, ConsumingUnitOfWork, retry_on_conflict


def record(offset: int) -> Record:
    return Record("topic", 0, offset, b"k", b"", (), 0)


class Counter:
    """A decide that appends one event per command to one stream, expecting the version it read."""

    def __init__(self, log: SqliteEventLog) -> None:
        self.log = log
        self.decided: list[list[str]] = []

    def decide(self, commands: list[str], checkpoints: list[Checkpoint]) -> bool:
        self.decided.append(list(commands))
        version = self.log.stream_version("counter")
        events = [NewEvent(f"{command}-{version}", "Counted", b"{}") for command in commands]
        self.log.append_batch([StreamAppend("counter", events, version)], checkpoints=checkpoints)
        return True


def test_consumed_records_are_skipped_and_positions_stored_with_the_events(tmp_path):
    log = SqliteEventLog(tmp_path / "events.db")
    counter = Counter(log)
    work = ConsumingUnitOfWork(ConsumedOffsets(log, "c"), counter.decide, lambda conflict: None, what="counter")
    work.handle([(record(0), "a"), (record(1), "b")])
    work.handle([(record(1), "b"), (record(2), "c")])  # offset 1 redelivered
    assert counter.decided == [["a", "b"], ["c"]]
    assert log.read_checkpoint("c:topic:0") == 3
    again = ConsumingUnitOfWork(ConsumedOffsets(log, "c"), counter.decide, lambda conflict: None, what="counter")
    again.handle([(record(2), "c")])  # after a restart: still consumed
    assert counter.decided == [["a", "b"], ["c"]]
    log.close()


def test_a_moved_position_is_read_again_and_what_the_other_writer_recorded_skipped(tmp_path):
    log = SqliteEventLog(tmp_path / "events.db")
    counter = Counter(log)
    first = ConsumingUnitOfWork(ConsumedOffsets(log, "c"), counter.decide, lambda conflict: None, what="counter")
    second = ConsumingUnitOfWork(ConsumedOffsets(log, "c"), counter.decide, lambda conflict: None, what="counter")
    first.handle([(record(0), "a")])
    second.handle([(record(0), "a"), (record(1), "b")])  # it read position 0 first: a is skipped
    first.handle([(record(1), "b"), (record(2), "c")])  # first still expects 1: CheckpointMoved, then only c
    assert counter.decided == [["a"], ["b"], ["b", "c"], ["c"]]
    assert log.read_checkpoint("c:topic:0") == 3
    log.close()


def test_a_conflict_is_reloaded_and_decided_again_up_to_the_bound():
    calls, reloaded = [], []

    def attempt() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise WrongExpectedVersion("s", 1, 2)
        return "done"

    assert retry_on_conflict(attempt, reloaded.append, what="s") == "done"
    assert len(reloaded) == 2

    def never() -> None:
        raise WrongExpectedVersion("s", 1, 2)

    with pytest.raises(RuntimeError, match=f"s: gave up after {MAX_CONFLICT_RETRIES} concurrent-write conflicts"):
        retry_on_conflict(never, lambda conflict: None, what="s")
