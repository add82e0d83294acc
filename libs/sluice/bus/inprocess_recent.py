"""The records an in-process bus appended last, per partition, so that a poll of a consumer that
keeps up takes them from memory instead of reading back from SQLite what this bus has just written.

Only a contiguous run of offsets is kept per partition: a record that does not follow the last one
kept (another bus on the same file appended in between) starts the run again. A read from an offset
outside the run gets None, and the caller reads the file; so what a consumer sees is what the file
holds, only sooner and cheaper.
"""
from __future__ import annotations

from collections.abc import Sequence

from sluice.bus.port import Record, TopicPartition

__all__ = ["RecentRecords"]

KEPT_PER_PARTITION = 512
"""Records kept per partition at least (up to twice as many between trims): a consumer that keeps up
is a few polls behind at most; one further behind reads the file."""


class RecentRecords:
    def __init__(self, kept: int = KEPT_PER_PARTITION) -> None:
        self._kept = kept
        self._runs: dict[tuple[str, int], list[Record]] = {}  # by (topic, partition)
        self._first: dict[tuple[str, int], int] = {}  # offset of each run's first record

    def add(self, records: Sequence[Record]) -> None:
        """Records just committed, in offset order within each partition."""
        runs, firsts = self._runs, self._first
        for record in records:
            tp = (record.topic, record.partition)
            run = runs.get(tp)
            if run is None or firsts[tp] + len(run) != record.offset:
                runs[tp] = [record]
                firsts[tp] = record.offset
                continue
            run.append(record)
            if len(run) >= 2 * self._kept:
                del run[:len(run) - self._kept]
                firsts[tp] = record.offset - self._kept + 1

    def read(self, tp: TopicPartition, start: int, limit: int) -> list[Record] | None:
        """Up to `limit` records from offset `start` on, as the file has them; None when `start` is not
        in the run kept (the caller reads the file)."""
        run = self._runs.get((tp.topic, tp.partition))
        if run is None:
            return None
        index = start - self._first[tp.topic, tp.partition]
        if not 0 <= index < len(run):
            return None
        return run[index:index + limit]
