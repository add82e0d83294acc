"""Datasets, pure: definitions, typed keys, filters, and transactions that commit or abort once."""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

import pytest

from sluice.domain.datasets import (
    DatasetCreated,
    DatasetSpec,
    KeyCondition,
    KeySpec,
    KeyType,
    MetadataCondition,
    Partition,
    PartitionFilter,
    PartitionsCommitted,
    Transaction,
    TransactionAborted,
    TransactionStatus,
    decide_abort,
    decide_commit,
    decide_create,
    validate_dataset,
    validate_filter,
    validate_partition,
)
from sluice.domain.errors import AlreadyExists, FailedPrecondition, InvalidArgument

NOW = datetime(2026, 11, 22, 10, tzinfo=timezone.utc)
SPEC = DatasetSpec("experiments", "clickstream",
                   (KeySpec("marketplace"), KeySpec("date", KeyType.DATE), KeySpec("hour", KeyType.INT)),
                   "/data/experiments/clickstream")
OPEN = Transaction(4, TransactionStatus.OPEN)


def partition(**key: object) -> Partition:
    return Partition({"marketplace": "US", "date": "2026-11-22", "hour": "09", **key}, "/data/x", 100, 10)


def test_keys_are_made_canonical_in_the_datasets_order():
    checked = validate_partition(SPEC, Partition({"hour": 9, "date": "2026-11-22", "marketplace": "US"}, "/x"))
    assert list(checked.key.items()) == [("marketplace", "US"), ("date", "2026-11-22"), ("hour", "9")]


@pytest.mark.parametrize("key, field, words", [
    ({"hour": "nine"}, "partition.key.hour", "INT"),
    ({"hour": "9.5"}, "partition.key.hour", "INT"),
    ({"date": "22/11/2026"}, "partition.key.date", "DATE"),
    ({"date": "20261122"}, "partition.key.date", "DATE"),
    ({"date": "2026-02-30"}, "partition.key.date", "DATE"),
    ({"marketplace": ""}, "partition.key.marketplace", "non-empty"),
    ({"marketplace": 7}, "partition.key.marketplace", "got int"),
    ({"region": "EU"}, "partition.key.region", "is not a partition key"),
])
def test_a_key_of_the_wrong_type_or_unknown_names_the_field(key, field, words):
    with pytest.raises(InvalidArgument) as error:
        validate_partition(SPEC, partition(**key))
    assert error.value.field == field and words in error.value.message


def test_a_missing_key_names_it():
    with pytest.raises(InvalidArgument) as error:
        validate_partition(SPEC, Partition({"marketplace": "US", "date": "2026-11-22"}, "/x"))
    assert error.value.field == "partition.key.hour" and "missing" in error.value.message


@pytest.mark.parametrize("changes, field", [
    (dict(location=""), "partition.location"),
    (dict(size_bytes=-1), "partition.size_bytes"),
    (dict(record_count=True), "partition.record_count"),
    (dict(metadata={"k": 1}), "partition.metadata"),
])
def test_other_partition_fields(changes, field):
    with pytest.raises(InvalidArgument) as error:
        validate_partition(SPEC, replace(partition(), **changes))
    assert error.value.field == field


@pytest.mark.parametrize("spec, field", [
    (replace(SPEC, namespace=""), "dataset.namespace"),
    (replace(SPEC, name="click stream"), "dataset.name"),
    (replace(SPEC, partition_keys=()), "dataset.partition_keys"),
    (replace(SPEC, partition_keys=(KeySpec("a"), KeySpec("a"))), "dataset.partition_keys[1].name"),
    (replace(SPEC, partition_keys=(KeySpec("a b"),)), "dataset.partition_keys[0].name"),
    (replace(SPEC, base_location=" "), "dataset.base_location"),
    (replace(SPEC, base_location="data/clickstream"), "dataset.base_location"),  # relative to which process?
])
def test_bad_dataset_definitions_name_the_field(spec, field):
    with pytest.raises(InvalidArgument) as error:
        validate_dataset(spec)
    assert error.value.field == field


def test_create_is_idempotent_for_the_same_definition_only():
    assert decide_create(None, SPEC, NOW) == [DatasetCreated(SPEC, NOW)]
    assert decide_create(SPEC, SPEC, NOW) == []
    with pytest.raises(AlreadyExists):
        decide_create(SPEC, replace(SPEC, base_location="/elsewhere"), NOW)


def test_a_transaction_commits_once_and_a_redo_of_the_same_commit_is_a_no_op():
    events = decide_commit(SPEC, OPEN, (partition(),), NOW)
    assert events == [PartitionsCommitted("experiments", "clickstream", 4, (validate_partition(SPEC, partition()),),
                                          NOW)]
    committed = Transaction(4, TransactionStatus.COMMITTED, events[0].partitions, NOW)
    assert decide_commit(SPEC, committed, (partition(),), NOW) == []
    with pytest.raises(FailedPrecondition, match="already committed"):
        decide_commit(SPEC, committed, (partition(hour="10"),), NOW)
    with pytest.raises(FailedPrecondition, match="cannot abort"):
        decide_abort(SPEC, committed, "no", NOW)


def test_an_aborted_transaction_cannot_commit():
    events = decide_abort(SPEC, OPEN, "run failed", NOW)
    assert events == [TransactionAborted("experiments", "clickstream", 4, "run failed", NOW)]
    aborted = Transaction(4, TransactionStatus.ABORTED, reason="run failed")
    assert decide_abort(SPEC, aborted, "again", NOW) == []
    with pytest.raises(FailedPrecondition, match="aborted"):
        decide_commit(SPEC, aborted, (partition(),), NOW)


def test_a_commit_needs_partitions_with_distinct_keys():
    with pytest.raises(InvalidArgument) as error:
        decide_commit(SPEC, OPEN, (), NOW)
    assert error.value.field == "partitions"
    with pytest.raises(InvalidArgument) as error:
        decide_commit(SPEC, OPEN, (partition(), partition(hour="9")), NOW)
    assert error.value.field == "partitions[1].key"
    with pytest.raises(InvalidArgument) as error:
        decide_commit(SPEC, OPEN, (partition(), partition(hour="x")), NOW)
    assert error.value.field == "partitions[1].key.hour"


def test_filters_compare_by_key_type_with_half_open_ranges():
    where = validate_filter(SPEC, PartitionFilter(keys=(KeyCondition("hour", lower="8", upper="10"),)))
    hours = [h for h in range(0, 24) if where.matches(SPEC, {"hour": str(h)}, {})]
    assert hours == [8, 9]   # as text, "10" < "8" and "9" > "8": numbers order differently
    dates = validate_filter(SPEC, PartitionFilter(keys=(KeyCondition("date", lower="2026-11-01"),
                                                        KeyCondition("marketplace", one_of=("US", "JP")))))
    assert dates.matches(SPEC, {"date": "2026-11-22", "marketplace": "JP"}, {})
    assert not dates.matches(SPEC, {"date": "2026-10-31", "marketplace": "JP"}, {})
    assert not dates.matches(SPEC, {"date": "2026-11-22", "marketplace": "UK"}, {})
    flagged = PartitionFilter(metadata=(MetadataCondition("quality"),))
    assert flagged.matches(SPEC, {}, {"quality": "any"}) and not flagged.matches(SPEC, {}, {})


def test_filter_values_are_made_canonical():
    where = validate_filter(SPEC, PartitionFilter(keys=(KeyCondition("hour", one_of=("09",)),)))
    assert where.keys[0].one_of == ("9",)


@pytest.mark.parametrize("where, field", [
    (PartitionFilter(keys=(KeyCondition("region", ("EU",)),)), "where.keys[0].name"),
    (PartitionFilter(keys=(KeyCondition("hour", ("x",)),)), "where.keys[0].one_of[0]"),
    (PartitionFilter(keys=(KeyCondition("hour", lower="12", upper="3"),)), "where.keys[0].upper"),
    (PartitionFilter(keys=(KeyCondition("date", lower="soon"),)), "where.keys[0].lower"),
    (PartitionFilter(metadata=(MetadataCondition(""),)), "where.metadata[0].name"),
])
def test_bad_filters_name_the_field(where, field):
    with pytest.raises(InvalidArgument) as error:
        validate_filter(SPEC, where)
    assert error.value.field == field


def test_default_location_follows_the_key_order():
    key = validate_partition(SPEC, partition()).key
    assert SPEC.default_location(key) == "/data/experiments/clickstream/marketplace=US/date=2026-11-22/hour=9"
