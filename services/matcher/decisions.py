"""One batch of the matcher's decisions: many commands over many schedules, one append.

Each schedule's state is taken from the aggregate store once, advanced in memory command after
command (`matching.step`: decide and the resulting state at once), and its events are gathered
into one record per matches partition (a Batch: the schedules' events under their own streams and
versions). Nothing reaches the store before the append succeeded."""
from __future__ import annotations

from datetime import datetime
from typing import Mapping

from sluice.bus.port import kafka_partition
from sluice.bus.topics import MATCHES_PARTITIONS
from sluice.domain import matching
from sluice.domain.jobs import Job
from sluice.domain.matching import JobTriggered, MatcherState
from sluice.eventlog.batched import batch, batches
from sluice.eventlog.codec import dumps
from sluice.eventlog.port import StreamAppend
from sluice.ids import time_ordered_ids
from sluice.runtime.aggregates import AggregateStore

PARTITION_STREAM_PREFIX = "matcher-partition-"
BATCH_BYTES = 64 * 1024
"""A partition's events of one append go in records of at most 64 KiB of events: a poll's in tens (against
thousands of rows before), each record well under the 1 MiB a KurrentDB server takes in one append by
default, and a reader's page of records (500 at once) in tens of MB."""


class Decisions:
    def __init__(self, store: AggregateStore[MatcherState], now: datetime,
                 partition_streams: Mapping[str, str] | None = None) -> None:
        """`partition_streams`: `partition_stream` of some schedules, known already."""
        self._store = store
        self.now = now
        self._partition_streams = partition_streams or {}
        self._states: dict[str, MatcherState] = {}
        self._loaded: dict[str, tuple[str, int]] = {}
        """Per schedule decided on, its stream and its version when loaded (the store's, until `commit`)."""
        self._events: dict[str, list] = {}
        self._partitions: list[str] = []

    def state(self, schedule_id: str) -> MatcherState:
        state = self._states.get(schedule_id)
        if state is None:
            stream = matching.stream_name(schedule_id)
            loaded = self._store.load(stream)
            self._loaded[schedule_id] = (stream, loaded.version)
            state = self._states[schedule_id] = loaded.state
        return state

    def decide(self, schedule_id: str, command: matching.MatcherCommand) -> None:
        state = self.state(schedule_id)
        events, after = matching.step(state, command, self.now)
        if not events:
            return
        self._states[schedule_id] = after
        self._events.setdefault(schedule_id, []).extend(events)

    def __bool__(self) -> bool:
        return bool(self._events)

    def appends(self) -> list[StreamAppend]:
        """Per partition stream the schedules decided on belong to, Batch records (sluice.eventlog.batched,
        up to BATCH_BYTES of events each) at its expected version: each schedule's events under its own
        stream's next versions. Ids are time-ordered (`time_ordered_id`): the log's index of ids grows at
        its right edge. The expected version refuses a second append of the same decision, whatever its ids."""
        event_id, load = time_ordered_ids(self.now), self._store.load
        by_partition: dict[str, list[tuple[str, int, str, bytes]]] = {}
        for schedule_id, events in self._events.items():
            stream, version = self._loaded[schedule_id]
            partition = self._partition_streams.get(schedule_id) or partition_stream(schedule_id)
            entries = by_partition.setdefault(partition, [])
            entries += [(stream, version + offset, type(event).__name__, dumps(event))
                        for offset, event in enumerate(events, start=1)]
        appends = []
        for partition, entries in by_partition.items():
            version = load(partition).version
            records = [batch(event_id(partition, str(version + number)), run)
                       for number, run in enumerate(batches(entries, BATCH_BYTES), start=1)]
            appends.append(StreamAppend(partition, records, version))
        self._partitions = list(by_partition)
        return appends

    def commit(self, versions: list[int]) -> list[tuple[str, MatcherState]]:
        """The append succeeded with these versions (one per partition stream): the store takes the
        new states; which changed."""
        states, store, loaded = self._states, self._store, self._loaded
        for schedule_id, events in self._events.items():
            stream, version = loaded[schedule_id]
            store.put(stream, states[schedule_id], version + len(events))
        # the partitions last: a snapshot in between reads their batch again, not skip it
        for partition, version in zip(self._partitions, versions):
            store.put(partition, MatcherState(), version)
        return [(schedule_id, states[schedule_id]) for schedule_id in self._events]

    def fired(self) -> list[tuple[tuple[str, int], Job]]:
        """((stream, version), job) of each JobTriggered decided: once committed, where the log holds it."""
        loaded = self._loaded
        return [((stream, version + offset), event.job)
                for schedule_id, events in self._events.items() for stream, version in (loaded[schedule_id],)
                for offset, event in enumerate(events, start=1) if type(event) is JobTriggered]


def partition_stream(schedule_id: str) -> str:
    """The stream of the matches partition the schedule's decisions are appended to: its owner is
    their one writer. (MATCHES_PARTITIONS fixed: a schedule's events stay in one such stream.)"""
    return _PARTITION_STREAMS[kafka_partition(schedule_id.encode(), MATCHES_PARTITIONS)]


_PARTITION_STREAMS = tuple(f"{PARTITION_STREAM_PREFIX}{partition}" for partition in range(MATCHES_PARTITIONS))
