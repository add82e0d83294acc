"""The in-process bus's records kept in memory: a contiguous run per partition, never a record the
file does not have at that offset."""
from __future__ import annotations

from sluice.bus.inprocess_recent import RecentRecords
from sluice.bus.port import Record, TopicPartition

TP = TopicPartition("t", 0)


def records(offsets, partition: int = 0) -> list[Record]:
    return [Record("t", partition, offset, None, f"v{offset}".encode(), (), 0) for offset in offsets]


def offsets(read: list[Record] | None) -> list[int] | None:
    return None if read is None else [record.offset for record in read]


def test_reads_from_an_offset_in_the_run_up_to_the_limit() -> None:
    recent = RecentRecords()
    recent.add(records(range(5)) + records(range(3), partition=1))
    assert offsets(recent.read(TP, 2, 10)) == [2, 3, 4]
    assert offsets(recent.read(TP, 1, 2)) == [1, 2]
    assert offsets(recent.read(TopicPartition("t", 1), 0, 10)) == [0, 1, 2]


def test_an_offset_outside_the_run_is_for_the_file() -> None:
    recent = RecentRecords()
    assert recent.read(TP, 0, 10) is None
    recent.add(records(range(3, 6)))
    assert recent.read(TP, 2, 10) is None
    assert recent.read(TP, 6, 10) is None


def test_a_gap_starts_the_run_again() -> None:
    recent = RecentRecords()
    recent.add(records([0, 1, 2]))
    recent.add(records([4, 5]))  # offset 3 was another bus's
    assert recent.read(TP, 3, 10) is None
    assert recent.read(TP, 0, 10) is None
    assert offsets(recent.read(TP, 4, 10)) == [4, 5]


def test_keeps_at_least_the_last_records_and_at_most_twice_as_many() -> None:
    recent = RecentRecords(kept=4)
    for offset in range(20):
        recent.add(records([offset]))
        run = recent.read(TP, max(0, offset - 3), 100)
        assert offsets(run) == list(range(max(0, offset - 3), offset + 1))
    assert recent.read(TP, 20 - 9, 100) is None
