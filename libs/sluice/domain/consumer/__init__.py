"""The partition consumer of seeds 003/004: incremental, never skipping a late commit, shared by takers."""
from sluice.domain.consumer.aggregate import (
    EVENTS,
    Complete,
    Configure,
    Consume,
    ConsumerConfigured,
    ConsumerCreated,
    CreateConsumer,
    Fail,
    PartitionsCompleted,
    PartitionsDiscarded,
    PartitionsDiscovered,
    PartitionsFailed,
    PartitionsReturned,
    PartitionsTaken,
    Untake,
    decide,
    evolve,
    fold,
)
from sluice.domain.consumer.scan import DiscoveredPartition, IndexView, ScanResult, scan
from sluice.domain.consumer.serialization import (
    ConsumerStateError,
    state_from_bytes,
    state_from_json,
    state_to_bytes,
    state_to_json,
)
from sluice.domain.consumer.state import (
    ConsumerConfig,
    ConsumerRef,
    ConsumerState,
    HistoryRecord,
    Outcome,
    PartitionId,
    WorkItem,
    WorkStatus,
    consumer_stream,
    snapshot_stream,
    validate_config,
    validate_ref,
)

__all__ = [
    "EVENTS", "Complete", "Configure", "Consume", "ConsumerConfigured", "ConsumerCreated", "CreateConsumer", "Fail",
    "PartitionsCompleted", "PartitionsDiscarded", "PartitionsDiscovered", "PartitionsFailed", "PartitionsReturned",
    "PartitionsTaken", "Untake", "decide", "evolve", "fold",
    "DiscoveredPartition", "IndexView", "ScanResult", "scan",
    "ConsumerStateError", "state_from_bytes", "state_from_json", "state_to_bytes", "state_to_json",
    "ConsumerConfig", "ConsumerRef", "ConsumerState", "HistoryRecord", "Outcome", "PartitionId", "WorkItem",
    "WorkStatus", "consumer_stream", "snapshot_stream", "validate_config", "validate_ref",
]
