"""Partitioned datasets: definitions, typed partition keys, filters and the transactions that add partitions."""
from sluice.domain.datasets.filters import MATCH_ALL, KeyCondition, MetadataCondition, PartitionFilter, validate_filter
from sluice.domain.datasets.specs import (
    DatasetSpec,
    KeySpec,
    KeyType,
    Partition,
    canonical_key,
    validate_dataset,
    validate_name,
    validate_partition,
)
from sluice.domain.datasets.transactions import (
    DATASET_EVENTS,
    TRANSACTION_EVENTS,
    DatasetCreated,
    PartitionsCommitted,
    Transaction,
    TransactionAborted,
    TransactionStarted,
    TransactionStatus,
    dataset_stream,
    decide_abort,
    decide_commit,
    decide_create,
    outcome_of,
    positions_stream,
    transaction_stream,
    validate_partitions,
)

__all__ = [
    "MATCH_ALL", "KeyCondition", "MetadataCondition", "PartitionFilter", "validate_filter",
    "DatasetSpec", "KeySpec", "KeyType", "Partition", "canonical_key", "validate_dataset", "validate_name",
    "validate_partition",
    "DATASET_EVENTS", "TRANSACTION_EVENTS", "DatasetCreated", "PartitionsCommitted", "Transaction",
    "TransactionAborted", "TransactionStarted", "TransactionStatus", "dataset_stream", "decide_abort",
    "decide_commit", "decide_create", "outcome_of", "positions_stream", "transaction_stream", "validate_partitions",
]
