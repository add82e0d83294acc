"""The dataset store and partition consumers on real event logs: one contract, SQLite and PostgreSQL."""
from __future__ import annotations

import base64
import json
from datetime import timedelta

import pytest

from sluice.clock import SimulatedClock
from sluice.datasets import ConsumerStore, DatasetStore, PartitionQuery
from sluice.datasets.consumers import ConsumerSnapshotted
from sluice.eventlog.codec import encode
from sluice.domain.consumer import ConsumerConfig, ConsumerRef, PartitionId, snapshot_stream, state_to_bytes
from sluice.domain.datasets import (
    DatasetSpec,
    KeyCondition,
    KeySpec,
    KeyType,
    MetadataCondition,
    Partition,
    PartitionFilter,
    TransactionStatus,
    transaction_stream,
)
from sluice.eventlog.port import ANY_VERSION, EventLog, NewEvent
from sluice.domain.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from tests.integration.datasets.backends import Backend, PostgresBackend, SqliteBackend

pytestmark = pytest.mark.integration

SPEC = DatasetSpec("experiments", "clickstream",
                   (KeySpec("marketplace"), KeySpec("date", KeyType.DATE), KeySpec("hour", KeyType.INT)),
                   "/data/experiments/clickstream", "hourly clickstream events")
REF = ConsumerRef("experiments", "clickstream", "hourly")


def part(marketplace: str = "US", hour: int = 9, date: str = "2026-11-22", **metadata: str) -> Partition:
    return Partition({"marketplace": marketplace, "date": date, "hour": str(hour)},
                     f"/data/experiments/clickstream/{marketplace}/{date}/{hour}", 1000 + hour, 10 * hour, metadata)


def everything(log: EventLog) -> list:
    return log.read_all(0, 1_000_000)


class DatasetStoreContract(Backend):
    @pytest.fixture(autouse=True)
    def _stores(self, _backend: None) -> None:
        self.clock = SimulatedClock()
        self.log = self.open_log(self.clock)
        self.datasets = DatasetStore(self.log, self.clock)
        self.consumers = ConsumerStore(self.log, self.datasets, self.clock, snapshot_every=8)
        self.datasets.create(SPEC)

    # -- datasets ------------------------------------------------------------------------------

    def test_create_and_describe(self) -> None:
        other = DatasetStore(self.open_log(), self.clock)   # another process: reads the log
        assert other.get("experiments", "clickstream") == SPEC
        assert self.datasets.create(SPEC) == SPEC          # the same definition again: fine
        with pytest.raises(AlreadyExists):
            other.create(DatasetSpec("experiments", "clickstream", (KeySpec("hour"),), "/elsewhere"))
        assert self.datasets.list("experiments") == [SPEC] and self.datasets.list("other") == []

    def test_an_unknown_dataset_is_not_found_and_changes_nothing(self) -> None:
        head = self.log.head_position()
        for call in (lambda: self.datasets.get("experiments", "nope"),
                     lambda: self.datasets.begin("experiments", "nope"),
                     lambda: self.datasets.add("experiments", "nope", [part()]),
                     lambda: self.datasets.query("experiments", "nope"),
                     lambda: self.consumers.consume(ConsumerRef("experiments", "nope", "c"), "run", 1)):
            with pytest.raises(NotFound, match="dataset experiments.nope does not exist"):
                call()
        assert self.log.head_position() == head

    # -- transactions --------------------------------------------------------------------------

    def test_transactions_commit_out_of_order_once_each_with_one_notification(self) -> None:
        first = self.datasets.begin("experiments", "clickstream", owner="writer-1")
        second = self.datasets.begin("experiments", "clickstream", owner="writer-2")
        assert (first, second) == (0, 1)
        self.datasets.commit("experiments", "clickstream", second, [part(hour=2), part(hour=3)])
        assert self.datasets.transaction("experiments", "clickstream", first).status is TransactionStatus.OPEN
        self.datasets.commit("experiments", "clickstream", first, [part(hour=1)])
        self.datasets.commit("experiments", "clickstream", first, [part(hour=1)])   # redone: no-op
        with pytest.raises(FailedPrecondition, match="already committed"):
            self.datasets.commit("experiments", "clickstream", first, [part(hour=5)])
        notifications = [e for e in everything(self.log) if e.type == "PartitionsCommitted"]
        assert [e.stream for e in notifications] == [transaction_stream("experiments", "clickstream", 1),
                                                     transaction_stream("experiments", "clickstream", 0)]
        assert json.loads(notifications[0].data)["partitions"][1]["key"]["hour"] == "3"

    def test_abort_and_positions_that_never_began(self) -> None:
        position = self.datasets.begin("experiments", "clickstream")
        self.datasets.abort("experiments", "clickstream", position, "the run failed")
        with pytest.raises(FailedPrecondition, match="was aborted"):
            self.datasets.commit("experiments", "clickstream", position, [part()])
        with pytest.raises(NotFound, match="never begun"):
            self.datasets.commit("experiments", "clickstream", position + 1, [part()])

    @pytest.mark.parametrize("partition, field", [
        (Partition({"marketplace": "US", "date": "2026-11-22"}, "/x"), "partitions[0].key.hour"),
        (Partition({"marketplace": "US", "date": "2026-11-22", "hour": "nine"}, "/x"), "partitions[0].key.hour"),
        (Partition({"marketplace": "US", "date": "tomorrow", "hour": "9"}, "/x"), "partitions[0].key.date"),
        (Partition({"marketplace": "US", "date": "2026-11-22", "hour": "9", "region": "EU"}, "/x"),
         "partitions[0].key.region"),
        (Partition({"marketplace": "US", "date": "2026-11-22", "hour": "9"}, ""), "partitions[0].location"),
    ])
    def test_a_bad_partition_is_refused_and_changes_nothing(self, partition: Partition, field: str) -> None:
        position = self.datasets.begin("experiments", "clickstream")
        head = self.log.head_position()
        for call in (lambda: self.datasets.add("experiments", "clickstream", [partition]),
                     lambda: self.datasets.commit("experiments", "clickstream", position, [partition])):
            with pytest.raises(InvalidArgument) as error:
                call()
            assert error.value.field == field
        assert self.log.head_position() == head
        assert self.datasets.next_position("experiments", "clickstream") == position + 1

    # -- queries -------------------------------------------------------------------------------

    def test_query_by_key_ranges_metadata_and_commit_time(self) -> None:
        for hour in range(6, 14):
            self.clock.advance(timedelta(minutes=10))
            self.datasets.add("experiments", "clickstream", [part("US", hour), part("JP", hour, quality="ok")])
        morning = PartitionFilter(keys=(KeyCondition("hour", lower="8", upper="11"),
                                        KeyCondition("marketplace", ("JP",))))
        found = self.datasets.query("experiments", "clickstream", PartitionQuery(where=morning))
        assert [p.partition.key["hour"] for p in found] == ["8", "9", "10"]
        flagged = PartitionQuery(where=PartitionFilter(metadata=(MetadataCondition("quality", ("ok",)),)), limit=3)
        assert [p.partition.key["marketplace"] for p in self.datasets.query("experiments", "clickstream", flagged)] \
            == ["JP", "JP", "JP"]
        start = self.clock.now() - timedelta(minutes=25)
        recent = PartitionQuery(committed_after=start, committed_before=self.clock.now())
        assert [str(p.id) for p in self.datasets.query("experiments", "clickstream", recent)] == [
            "5.0", "5.1", "6.0", "6.1"]   # committed 20 and 10 minutes ago; the last one at `now` is out

    def test_query_pages_resume_after_the_last_partition(self) -> None:
        self.datasets.add("experiments", "clickstream", [part(hour=h) for h in range(5)])
        self.datasets.add("experiments", "clickstream", [part(hour=h) for h in range(5, 8)])
        pages, after = [], None
        while page := self.datasets.query("experiments", "clickstream", PartitionQuery(after=after, limit=3)):
            pages.append([str(p.id) for p in page])
            after = page[-1].id
        assert pages == [["0.0", "0.1", "0.2"], ["0.3", "0.4", "1.0"], ["1.1", "1.2"]]

    def test_bad_queries_name_the_field(self) -> None:
        with pytest.raises(InvalidArgument) as error:
            self.datasets.query("experiments", "clickstream", PartitionQuery(limit=0))
        assert error.value.field == "limit"
        with pytest.raises(InvalidArgument) as error:
            self.datasets.query("experiments", "clickstream",
                                PartitionQuery(where=PartitionFilter((KeyCondition("hour", ("late",)),))))
        assert error.value.field == "where.keys[0].one_of[0]"

    # -- consumers -----------------------------------------------------------------------------

    def test_consumer_state_survives_a_restart_through_snapshots(self) -> None:
        for hour in range(20):
            self.datasets.add("experiments", "clickstream", [part(hour=hour)])
            items = self.consumers.consume(REF, f"run-{hour}", 2)
            self.consumers.complete(REF, f"run-{hour}", [items[0].id])
        assert self.log.stream_version(snapshot_stream(REF)) >= 1
        restarted = ConsumerStore(self.open_log(), DatasetStore(self.open_log(), self.clock), self.clock)
        assert restarted.state(REF) == self.consumers.state(REF)

    def test_an_unreadable_snapshot_falls_back_to_the_whole_stream(self) -> None:
        self.datasets.add("experiments", "clickstream", [part(hour=1)])
        self.consumers.consume(REF, "run-1", 1)
        expected = self.consumers.state(REF)
        broken = ConsumerSnapshotted(0, base64.b64encode(state_to_bytes(expected)[:-9]).decode())
        self.log.append(snapshot_stream(REF), [encode(broken, "broken-snapshot")], ANY_VERSION)
        restarted = ConsumerStore(self.open_log(), DatasetStore(self.open_log(), self.clock), self.clock)
        assert restarted.state(REF) == expected

    def test_a_snapshot_event_that_does_not_decode_falls_back_to_the_whole_stream(self) -> None:
        self.datasets.add("experiments", "clickstream", [part(hour=1)])
        self.consumers.consume(REF, "run-1", 1)
        expected = self.consumers.state(REF)
        corrupt = NewEvent("corrupt-snapshot", ConsumerSnapshotted.__name__, b'{"version": 0, "sta', {})
        self.log.append(snapshot_stream(REF), [corrupt], ANY_VERSION)
        restarted = ConsumerStore(self.open_log(), DatasetStore(self.open_log(), self.clock), self.clock)
        assert restarted.state(REF) == expected

    @pytest.mark.parametrize("limit", [0, -3])
    def test_a_limit_below_one_is_refused_and_changes_nothing(self, limit: int) -> None:
        self.datasets.add("experiments", "clickstream", [part()])
        head = self.log.head_position()
        with pytest.raises(InvalidArgument) as error:
            self.consumers.consume(REF, "run-1", limit)
        assert error.value.field == "limit" and str(limit) in error.value.message
        assert self.log.head_position() == head

    def test_a_corrupt_consumer_state_is_refused(self) -> None:
        self.datasets.add("experiments", "clickstream", [part()])
        self.consumers.consume(REF, "run-1", 1)
        good = state_to_bytes(self.consumers.state(REF))
        self.datasets.add("experiments", "clickstream", [part(hour=10)])
        head = self.log.head_position()
        items, after = self.consumers.consume_with_state(good, "run-2", 5)   # the caller keeps the state
        assert [item.partition.key["hour"] for item in items] == ["10"] and after != good
        for damaged in (b"", good[:20], good[:30] + b"\x00" + good[31:], b"SLCS\x01" + b"x" * 40):
            with pytest.raises(InvalidArgument) as error:
                self.consumers.consume_with_state(damaged, "run-2", 5)
            assert error.value.field == "consumer_state" and "consumer state" in error.value.message
        assert self.log.head_position() == head

    def test_a_consumers_bad_configuration_names_the_field(self) -> None:
        head = self.log.head_position()
        for config, field in ((ConsumerConfig(max_working_set=0), "config.max_working_set"),
                              (ConsumerConfig(where=PartitionFilter((KeyCondition("hour", ("x",)),))),
                               "config.where.keys[0].one_of[0]")):
            with pytest.raises(InvalidArgument) as error:
                self.consumers.consume(REF, "run-1", 1, config=config)
            assert error.value.field == field
        with pytest.raises(NotFound):
            self.consumers.complete(REF, "run-1", [PartitionId(0, 0)])
        assert self.log.head_position() == head


class TestSqliteDatasetStore(SqliteBackend, DatasetStoreContract):
    pass


class TestPostgresDatasetStore(PostgresBackend, DatasetStoreContract):
    pass
