"""Consumed bus offsets recorded in the event log with the events they caused (atomic
consume-and-record): after a crash a handler skips exactly what it had already recorded."""
from __future__ import annotations

from sluice.bus.port import Record
from sluice.eventlog.port import Checkpoint, EventLog


class ConsumedOffsets:
    def __init__(self, log: EventLog, consumer: str) -> None:
        self._log = log
        self._consumer = consumer
        self._next: dict[str, int] = {}
        self._names: dict[tuple[str, int], str] = {}

    def name(self, record: Record) -> str:
        """The checkpoint of the record's topic and partition."""
        return self.name_of(record.topic, record.partition)

    def name_of(self, topic: str, partition: int) -> str:
        """The checkpoint of a topic's partition (one name per partition, made once)."""
        name = self._names.get((topic, partition))
        if name is None:
            name = self._names[topic, partition] = f"{self._consumer}:{topic}:{partition}"
        return name

    def refresh(self, names: set[str]) -> None:
        """Read these positions from the log again: another member of the group recorded records of
        these partitions since (a rebalance moved them while it finished a poll: CheckpointMoved)."""
        saved = self._log.read_checkpoints(names)
        for name in names:
            self._next[name] = saved.get(name, 0)

    def next(self, name: str) -> int:
        """The recorded position: what comes before it was recorded."""
        position = self._next.get(name)
        if position is None:
            position = self._next[name] = self._log.read_checkpoint(name) or 0
        return position

    def recorded(self, checkpoint: Checkpoint) -> None:
        """The checkpoint was appended: records before it are redeliveries from now on."""
        self._next[checkpoint.name] = max(self._next.get(checkpoint.name, 0), checkpoint.value)

    def clear(self) -> None:
        self._next.clear()
