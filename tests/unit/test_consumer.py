"""The partition consumer, pure: scan over a simulated index, working set, retries, timeouts, takers."""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from sluice.domain.consumer import (
    Complete,
    Configure,
    Consume,
    ConsumerConfig,
    ConsumerRef,
    CreateConsumer,
    Fail,
    IndexView,
    Outcome,
    PartitionId,
    PartitionsDiscarded,
    PartitionsFailed,
    Untake,
    WorkStatus,
    decide,
    fold,
    scan,
)
from sluice.domain.datasets import (
    DatasetSpec,
    KeyCondition,
    KeySpec,
    KeyType,
    MetadataCondition,
    Partition,
    PartitionFilter,
    Transaction,
    TransactionStatus,
)
from sluice.domain.errors import FailedPrecondition, InvalidArgument

T0 = datetime(2026, 11, 22, 10, tzinfo=timezone.utc)
SPEC = DatasetSpec("experiments", "clickstream", (KeySpec("marketplace"), KeySpec("hour", KeyType.INT)), "/data/c")
REF = ConsumerRef("experiments", "clickstream", "hourly")


def partition(marketplace: str = "US", hour: int = 0, **metadata: str) -> Partition:
    return Partition({"marketplace": marketplace, "hour": str(hour)}, f"/data/c/{marketplace}/{hour}", 10, 1, metadata)


class Index:
    """An index as a reader sees it: positions begun in order, committed or aborted in any order."""

    def __init__(self) -> None:
        self.transactions: list[Transaction] = []

    def begin(self) -> int:
        self.transactions.append(Transaction(len(self.transactions), TransactionStatus.OPEN))
        return len(self.transactions) - 1

    def commit(self, position: int, *partitions: Partition, at: datetime = T0) -> None:
        self.transactions[position] = Transaction(position, TransactionStatus.COMMITTED, partitions, at)

    def abort(self, position: int) -> None:
        self.transactions[position] = Transaction(position, TransactionStatus.ABORTED, reason="test")

    def add(self, *partitions: Partition, at: datetime = T0) -> int:
        position = self.begin()
        self.commit(position, *partitions, at=at)
        return position

    def view(self) -> IndexView:
        return IndexView(len(self.transactions), {t.position: t for t in self.transactions})


def consumer(config: ConsumerConfig = ConsumerConfig()):
    return fold(None, decide(None, CreateConsumer(REF, config), T0))


def consume(state, index: Index, taker: str = "run-1", limit: int = 100, now: datetime = T0, **options):
    events = decide(state, Consume(taker, limit, **options), now, SPEC, index.view())
    state = fold(state, events)
    taken = [item for item in state.working_set if item.taken_by == taker and item.taken_at == now
             and item.status is WorkStatus.IN_PROGRESS]
    return state, taken


def test_a_transaction_that_commits_late_is_consumed_by_a_later_call():
    index = Index()
    early = index.begin()                          # position 0: still open
    index.add(partition("US", 1))                  # position 1 commits first
    state, taken = consume(consumer(), index)
    assert [item.id for item in taken] == [PartitionId(1, 0)]
    assert state.high_water_mark == 2 and state.in_flight == (early,)
    index.commit(early, partition("US", 0))
    state, taken = consume(state, index, taker="run-2")
    assert [item.id for item in taken] == [PartitionId(0, 0)]
    assert state.in_flight == ()


def test_aborted_transactions_leave_the_in_flight_set():
    index = Index()
    position = index.begin()
    state, _ = consume(consumer(), index)
    assert state.in_flight == (position,)
    index.abort(position)
    state, taken = consume(state, index)
    assert taken == [] and state.in_flight == () and state.high_water_mark == 1


def test_the_consumers_own_transaction_is_excluded_but_read_once_committed():
    index = Index()
    own = index.begin()
    index.commit(own, partition("US", 5))          # committed already, but the caller writes in it
    state, taken = consume(consumer(), index, own_position=own)
    assert taken == [] and state.in_flight == (own,)
    state, taken = consume(state, index, taker="run-2")
    assert [item.id for item in taken] == [PartitionId(own, 0)]


def test_limit_per_call_and_position_order():
    index = Index()
    for hour in range(5):
        index.add(partition("US", hour))
    state, taken = consume(consumer(), index, limit=2)
    assert [item.partition.key["hour"] for item in taken] == ["0", "1"]
    assert state.count(WorkStatus.AVAILABLE) == 3
    state, taken = consume(state, index, taker="run-2", limit=10)
    assert [item.partition.key["hour"] for item in taken] == ["2", "3", "4"]


def test_takers_never_share_a_partition():
    index = Index()
    for hour in range(6):
        index.add(partition("US", hour))
    state = consumer()
    seen = set()
    for taker in ("a", "b", "c"):
        state, taken = consume(state, index, taker=taker, limit=2)
        ids = {item.id for item in taken}
        assert len(ids) == 2 and not ids & seen
        seen |= ids


def test_max_working_set_stops_reading_the_index_until_partitions_finish():
    index = Index()
    for hour in range(5):
        index.add(partition("US", hour))
    state, taken = consume(consumer(ConsumerConfig(max_working_set=2)), index, limit=10)
    assert len(taken) == 2 and state.high_water_mark == 2
    state = fold(state, decide(state, Complete("run-1", tuple(i.id for i in taken)), T0))
    state, taken = consume(state, index, limit=10)
    assert [item.partition.key["hour"] for item in taken] == ["2", "3"]


def test_a_transaction_larger_than_the_working_set_enters_whole_when_it_is_empty():
    index = Index()
    index.add(*(partition("US", hour) for hour in range(5)))
    index.add(partition("UK", 1))
    state, taken = consume(consumer(ConsumerConfig(max_working_set=3)), index, limit=10)
    assert len(taken) == 5 and state.high_water_mark == 1


def test_a_late_commit_that_does_not_fit_stays_in_flight():
    index = Index()
    late = index.begin()
    index.add(partition("US", 1), partition("US", 2))
    state, _ = consume(consumer(ConsumerConfig(max_working_set=2)), index, limit=1)
    index.commit(late, partition("US", 0))
    state, _ = consume(state, index, taker="run-2", limit=1)
    assert state.in_flight == (late,) and len(state.working_set) == 2
    state = fold(state, decide(state, Complete("run-1", (PartitionId(1, 0),)), T0))
    state, taken = consume(state, index, taker="run-3", limit=5)
    assert PartitionId(late, 0) in {item.id for item in taken} and state.in_flight == ()


def test_the_consumers_predicate_leaves_partitions_out_entirely():
    index = Index()
    index.add(partition("US", 1), partition("UK", 1, quality="ok"), partition("UK", 2, quality="bad"))
    where = PartitionFilter(keys=(KeyCondition("marketplace", one_of=("UK",)),),
                            metadata=(MetadataCondition("quality", ("ok",)),))
    state, taken = consume(consumer(ConsumerConfig(where=where)), index)
    assert [item.partition.key for item in taken] == [{"marketplace": "UK", "hour": "1"}]
    assert len(state.working_set) == 1


def test_a_per_call_filter_takes_only_matching_partitions_and_leaves_the_rest():
    index = Index()
    index.add(*(partition(m, h) for m in ("US", "UK") for h in (8, 9, 10, 11, 12)))
    hours = PartitionFilter(keys=(KeyCondition("hour", lower="9", upper="12"), KeyCondition("marketplace", ("UK",))))
    state, taken = consume(consumer(), index, where=hours)
    assert sorted(item.partition.key["hour"] for item in taken) == ["10", "11", "9"]
    assert state.count(WorkStatus.AVAILABLE) == 7


def test_time_bounds_select_partitions_by_commit_time():
    index = Index()
    for hours in range(4):
        index.add(partition("US", hours), at=T0 + timedelta(hours=hours))
    config = ConsumerConfig(start=T0 + timedelta(hours=1), end=T0 + timedelta(hours=3))
    state, taken = consume(consumer(config), index)
    assert [item.partition.key["hour"] for item in taken] == ["1", "2"]
    assert state.high_water_mark == 4


def test_failures_are_retried_then_discarded():
    index = Index()
    index.add(partition("US", 1))
    state = consumer(ConsumerConfig(max_retries=2))
    for attempt in range(3):
        state, taken = consume(state, index, taker=f"run-{attempt}")
        assert [item.failures for item in taken] == [attempt]
        events = decide(state, Fail(f"run-{attempt}", (taken[0].id,), "boom"), T0)
        state = fold(state, events)
    assert isinstance(events[-1], PartitionsDiscarded)
    assert state.working_set == () and state.history[-1].outcome is Outcome.DISCARDED
    _, taken = consume(state, index, taker="run-9")
    assert taken == []


def test_an_in_progress_partition_past_its_timeout_counts_as_failed():
    index = Index()
    index.add(partition("US", 1))
    state, taken = consume(consumer(ConsumerConfig(timeout_seconds=60, max_retries=1)), index, taker="slow")
    later = T0 + timedelta(seconds=59)
    state, taken = consume(state, index, taker="other", now=later)
    assert taken == []
    events = decide(state, Consume("other", 1), T0 + timedelta(seconds=60), SPEC, index.view())
    assert isinstance(events[0], PartitionsFailed) and events[0].taker == "slow"
    state = fold(state, events)
    (item,) = state.working_set
    assert item.taken_by == "other" and item.failures == 1
    with pytest.raises(FailedPrecondition, match="in progress by other"):
        decide(state, Complete("slow", (item.id,)), T0 + timedelta(seconds=61))


def test_untake_returns_partitions_without_counting_a_failure():
    index = Index()
    index.add(partition("US", 1))
    state, taken = consume(consumer(), index)
    state = fold(state, decide(state, Untake("run-1", (taken[0].id,)), T0))
    (item,) = state.working_set
    assert item.status is WorkStatus.AVAILABLE and item.failures == 0 and item.taken_by == ""


def test_complete_is_idempotent_and_leaves_a_history_record():
    index = Index()
    index.add(partition("US", 1))
    state, taken = consume(consumer(), index)
    ids = (taken[0].id,)
    state = fold(state, decide(state, Complete("run-1", ids), T0))
    assert state.working_set == () and state.history[-1].outcome is Outcome.COMPLETED
    assert state.history[-1].taken_by == "run-1"
    assert decide(state, Complete("run-1", ids), T0) == []


def test_history_is_bounded():
    index = Index()
    for hour in range(5):
        index.add(partition("US", hour))
    state, taken = consume(consumer(ConsumerConfig(history_size=2)), index)
    state = fold(state, decide(state, Complete("run-1", tuple(i.id for i in taken)), T0))
    assert [record.key["hour"] for record in state.history] == ["3", "4"]


@pytest.mark.parametrize("command, field", [
    (Consume("run", 0), "limit"),
    (Consume("run", -1), "limit"),
    (Consume("", 1), "taker"),
    (Complete("run", (PartitionId(7, 0),)), "partitions[0]"),
    (Configure(ConsumerConfig(max_working_set=0)), "config.max_working_set"),
    (Configure(ConsumerConfig(max_retries=-1)), "config.max_retries"),
    (Configure(ConsumerConfig(timeout_seconds=-5)), "config.timeout_seconds"),
    (Configure(ConsumerConfig(start=T0, end=T0)), "config.end"),
    (Configure(ConsumerConfig(start=datetime(2026, 1, 1))), "config.start"),
])
def test_bad_commands_name_the_field(command, field):
    index = Index()
    index.add(partition())
    with pytest.raises(InvalidArgument) as error:
        decide(consumer(), command, T0, SPEC, index.view())
    assert error.value.field == field


def test_bad_consumer_names_are_rejected():
    with pytest.raises(InvalidArgument) as error:
        decide(None, CreateConsumer(replace(REF, name="has space")), T0)
    assert error.value.field == "consumer.name"


def test_scan_asks_for_the_positions_it_has_not_seen():
    state = replace(consumer(), high_water_mark=3, in_flight=(1,))
    result = scan(state, SPEC, IndexView(10))
    assert result.wanted == (1, 3, 4, 5, 6, 7, 8, 9)
    assert result.high_water_mark == 3 and result.in_flight == (1,) and result.discovered == ()
