"""The launcher's data plane: datasets, the partition index, partition consumers and commit sequences.

One object wires the stores on the launcher's event log; `recover` learns the datasets and redoes
unfinished commit sequences before anything else runs; `route` publishes one partition notification
per committed transaction through the outbox."""
from __future__ import annotations

from sluice.bus.topics import PARTITION_NOTIFICATIONS
from sluice.clock import Clock
from sluice.datasets import ConsumerStore, DatasetStore
from sluice.datasets.events import decode_event
from sluice.datasets.store import TYPES as DATASET_TYPES
from sluice.domain.common import Notification, PartitionCommitted, PartitionRef
from sluice.domain.datasets.transactions import DatasetCreated, PartitionsCommitted
from sluice.eventlog.port import EventLog, RecordedEvent
from sluice.ids import derived_id
from sluice.runtime import snapshots
from sluice.runtime.outbox import Outgoing
from sluice.runtime.snapshots import Schema, Snapshots
from sluice.wire.common import notification_to_proto
from sluice_services.launcher.commits import STREAM_PREFIX as COMMIT_PREFIX
from sluice_services.launcher.commits import CommitRunner, FileSteps
from sluice_services.catalogue import LAUNCHER

TRANSACTION_PREFIX = LAUNCHER.stream_prefixes[1]
SNAPSHOTS = ("launcher-datasets",)
SNAPSHOT_VERSION = 1
"""The schema version of the datasets snapshot (every DatasetCreated, and the ids of the commit
sequences left unfinished): bump it when DatasetCreated (or anything it holds) changes shape, or
what the snapshot holds does."""


class DatasetsService:
    def __init__(self, log: EventLog, clock: Clock, *, files: FileSteps | None = None) -> None:
        self.log = log
        self.datasets = DatasetStore(log, clock)
        self.consumers = ConsumerStore(log, self.datasets, clock)
        self.commits = CommitRunner(log, self.datasets, self.consumers, clock, files=files)

    def recover(self) -> None:
        """Learn every dataset, then redo unfinished commit sequences (quarantining the ones that keep
        failing) before the launcher takes new work. Starts from the snapshot of the datasets and the
        sequences left unfinished at a position, and saves a new one after a long read."""
        store = Snapshots(self.log, SNAPSHOTS[0],
                          Schema(tuple[tuple[DatasetCreated, ...], tuple[str, ...]], SNAPSHOT_VERSION))
        after, created, sequence_ids = 0, [], []
        if (loaded := store.load()) is not None and isinstance(loaded[1], tuple) and len(loaded[1]) == 2:
            after, (created, sequence_ids) = loaded[0], (list(loaded[1][0]), list(loaded[1][1]))
        for event in created:
            self.datasets.observe(event)
        read = 0
        while records := self.log.read_all(after, 10_000):
            read += len(records)
            for recorded in records:
                if recorded.type == "DatasetCreated" and recorded.stream.startswith("dataset-"):
                    created.append(DATASET_TYPES.decode(recorded))
                    self.datasets.observe(created[-1])
                elif recorded.type == "CommitSequenceRecorded" and recorded.stream.startswith(COMMIT_PREFIX):
                    sequence_ids.append(recorded.stream.removeprefix(COMMIT_PREFIX))
            after = records[-1].position
        unfinished = self.commits.recover(sequence_ids)
        if read >= snapshots.SNAPSHOT_EVERY:
            store.save(after, (tuple(created), tuple(p.sequence.id for p in unfinished)))

    def route(self, recorded: RecordedEvent) -> list[Outgoing]:
        if recorded.type != "PartitionsCommitted" or not recorded.stream.startswith(TRANSACTION_PREFIX):
            return []
        event = decode_event(DATASET_TYPES, recorded)
        assert isinstance(event, PartitionsCommitted)
        payload = PartitionCommitted(event.namespace, event.dataset, tuple(
            PartitionRef(dict(p.key), p.location, p.size_bytes, p.record_count, dict(p.metadata))
            for p in event.partitions))
        notification = Notification(derived_id(recorded.id, "notification"), recorded.recorded_at, payload)
        return [Outgoing(PARTITION_NOTIFICATIONS, notification.event_key(),
                         notification_to_proto(notification).SerializeToString())]


