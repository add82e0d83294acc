"""The datasets service: datasets, the partition index, partition consumers, commit sequences and the
runs' access to them (the data plane; `sluice serve datasets`).

One object wires the stores on the service's event log; `recover` learns the datasets and redoes
unfinished commit sequences before anything else runs; `route` publishes one partition notification
per committed transaction through the outbox. The launcher reaches it only through its gRPC API
(grpc_api.py: Partitions for everyone, RunData for the launcher)."""
from __future__ import annotations

from sluice.bus.topics import PARTITION_NOTIFICATIONS
from sluice.clock import Clock
from sluice.datasets import ConsumerStore, DatasetStore
from sluice.datasets.events import decode_event
from sluice.datasets.store import TYPES as DATASET_TYPES
from sluice.domain.errors import InvalidArgument
from sluice.domain.common import Notification, PartitionCommitted, PartitionRef
from sluice.domain.datasets import run_access
from sluice.domain.datasets.run_access import RunAccess
from sluice.domain.datasets.transactions import DatasetCreated, PartitionsCommitted
from sluice.domain.runs import OutputPartition
from sluice.eventlog.codec import EventTypes
from sluice.eventlog.port import Checkpoint, EventLog, RecordedEvent, StreamAppend
from sluice.ids import derived_id
from sluice.runtime import snapshots
from sluice.runtime.aggregates import AggregateStore, execute
from sluice.runtime.outbox import Outgoing
from sluice.runtime.snapshots import Schema, Snapshots
from sluice.wire.common import notification_to_proto
from sluice_services.catalogue import DATASETS, LAUNCHER
from sluice_services.datasets.commits import STREAM_PREFIX as COMMIT_PREFIX
from sluice_services.datasets.commits import CommitRunner, FileSteps

TRANSACTION_PREFIX = DATASETS.stream_prefixes[0]
SNAPSHOTS = DATASETS.snapshots
ACCESS_TYPES = EventTypes(run_access.EVENTS)
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
        self._clock = clock
        self._access: AggregateStore[RunAccess | None] = AggregateStore(log, ACCESS_TYPES, run_access.evolve, None,
                                                                             clock=clock)

    # -- the runs' access ------------------------------------------------------------------------

    def open_access(self, run_id: str, grants: tuple[run_access.AccessGrant, ...], attempt: int = 0) -> RunAccess:
        """FailedPrecondition naming the attempt when it ended or a later one opened."""
        now = self._clock.now()
        access, _ = execute(self._access, self.log, run_access.stream_name(run_id),
                            lambda current: run_access.decide(current, run_access.Open(run_id, grants, attempt), now))
        return access

    def close_access(self, run_id: str, reason: str, attempt: int = 0) -> RunAccess | None:
        """The attempt ended without publishing; the access as it is now (a stale attempt's close changes
        nothing, a published run's neither)."""
        return self._decided_anew(run_id, run_access.Close(run_id, reason, attempt))

    def prepare_publish(self, run_id: str, attempt: int, outputs: tuple[OutputPartition, ...]) -> StreamAppend | None:
        """The append recording that `attempt` published the run's outputs (ending its access), for the
        append that records its commit sequence: it conflicts if the access changed meanwhile (the
        attempt released, a later one opened). FailedPrecondition naming the attempt when it may not."""
        stream = run_access.stream_name(run_id)
        self._access.forget(stream)  # decided on the log as it is now: a conflict brings the caller back here
        events = run_access.decide(self._access.load(stream).state, run_access.Publish(run_id, attempt, outputs),
                                   self._clock.now())
        prepared = self._access.prepare(stream, events) if events else None
        self._access.forget(stream)
        return prepared

    def publish_access(self, run_id: str, attempt: int, outputs: tuple[OutputPartition, ...]) -> RunAccess:
        """`prepare_publish` appended alone (a run with nothing to commit, or its sequence recorded already)."""
        return self._decided_anew(run_id, run_access.Publish(run_id, attempt, outputs))

    def _decided_anew(self, run_id: str, command: run_access.RunAccessCommand) -> RunAccess | None:
        """The command decided on the access as the log has it now (another process may have changed it), appended."""
        now = self._clock.now()
        stream = run_access.stream_name(run_id)
        self._access.forget(stream)
        access, _ = execute(self._access, self.log, stream, lambda current: run_access.decide(current, command, now))
        self._access.forget(stream)
        return access

    def access(self, run_id: str) -> RunAccess | None:
        """The run's access as the log has it (None: never opened, or not a run id)."""
        try:
            stream = run_access.stream_name(run_id)
        except InvalidArgument:
            return None
        return self._access.load(stream).state

    def recover(self, *, save_snapshot: bool = False) -> None:
        """Learn every dataset, then redo unfinished commit sequences (quarantining the ones that keep
        failing) before the launcher takes new work. Starts from the snapshot of the datasets and the
        sequences left unfinished at a position, and saves a new one after a long read (or always:
        `save_snapshot`, for `sluice rebuild datasets`)."""
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
        if read >= snapshots.SNAPSHOT_EVERY or save_snapshot:
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


def adopt_relay_position(log: EventLog) -> None:
    """The datasets service's outbox relay starts where the launcher's stood, the first time: the
    launcher relayed these transactions before the datasets service was split out of it, and a relay
    starting at 0 would announce every partition ever committed again."""
    mine, launchers = f"outbox:{DATASETS.name}", f"outbox:{LAUNCHER.name}"
    saved = log.read_checkpoints([mine, launchers])
    if mine not in saved and launchers in saved:
        log.save_checkpoint(Checkpoint(mine, saved[launchers]))
