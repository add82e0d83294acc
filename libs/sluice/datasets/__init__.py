"""Datasets, their partition index and partition consumers, stored on the event-log port."""
from sluice.datasets.consumers import ConsumerStore
from sluice.datasets.store import DatasetStore, IndexedPartition, PartitionQuery

__all__ = ["ConsumerStore", "DatasetStore", "IndexedPartition", "PartitionQuery"]
