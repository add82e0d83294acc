"""Property: whatever the order of commits, failures, retries and timeouts, and however many takers
share a consumer, every committed partition is completed exactly once or discarded after its
retries, and none is missed. Pure: a simulated index and the consumer's decide/evolve."""
from __future__ import annotations

from collections import Counter
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.domain.consumer import (
    Complete,
    Consume,
    ConsumerConfig,
    ConsumerState,
    Fail,
    PartitionsCompleted,
    PartitionsDiscarded,
    PartitionsTaken,
    Untake,
    WorkStatus,
    decide,
    evolve,
)
from sluice.domain.consumer import PartitionId
from sluice.domain.datasets import TransactionStatus
from sluice.domain.errors import FailedPrecondition
from tests.unit.test_consumer import SPEC, T0, Index, consumer, partition

TAKERS = ("a", "b", "c")

operations = st.lists(st.one_of(
    st.tuples(st.just("begin")),
    st.tuples(st.just("commit"), st.integers(0, 50), st.integers(1, 3)),
    st.tuples(st.just("abort"), st.integers(0, 50)),
    st.tuples(st.just("consume"), st.sampled_from(TAKERS), st.integers(1, 4), st.booleans()),
    st.tuples(st.just("finish"), st.sampled_from(TAKERS), st.sampled_from(("complete", "fail", "untake"))),
    st.tuples(st.just("late-complete"), st.sampled_from(TAKERS)),
    st.tuples(st.just("advance"), st.integers(1, 90)),
), max_size=60)

configs = st.builds(ConsumerConfig, max_working_set=st.integers(1, 6), max_retries=st.integers(0, 2),
                    timeout_seconds=st.sampled_from((0, 30, 60)))


class Run:
    def __init__(self, config: ConsumerConfig) -> None:
        self.index = Index()
        self.state: ConsumerState = consumer(config)
        self.now = T0
        self.completed: Counter[PartitionId] = Counter()
        self.discarded: set[PartitionId] = set()
        self.held: dict[str, list[PartitionId]] = {taker: [] for taker in TAKERS}
        self.hours = iter(range(10_000))

    def apply(self, command: object) -> None:
        before = self.state
        events = decide(self.state, command, self.now, SPEC, self.index.view())
        for event in events:
            if isinstance(event, PartitionsTaken):
                items = self.state.items()
                assert all(items[i].status is WorkStatus.AVAILABLE for i in event.partitions), "taken twice"
                self.held[event.taker] = self.held.get(event.taker, []) + list(event.partitions)
            if isinstance(event, PartitionsCompleted):
                self.completed.update(event.partitions)
            if isinstance(event, PartitionsDiscarded):
                self.discarded.update(event.partitions)
            self.state = evolve(self.state, event)
        assert before.high_water_mark <= self.state.high_water_mark

    def open_positions(self) -> list[int]:
        return [t.position for t in self.index.transactions if t.status is TransactionStatus.OPEN]

    def step(self, operation: tuple) -> None:
        match operation:
            case ("begin",):
                self.index.begin()
            case ("commit", k, n):
                if open_ := self.open_positions():
                    parts = [partition("US", next(self.hours)) for _ in range(n)]
                    self.index.commit(open_[k % len(open_)], *parts, at=self.now)
            case ("abort", k):
                if open_ := self.open_positions():
                    self.index.abort(open_[k % len(open_)])
            case ("consume", taker, limit, own):
                open_ = self.open_positions()
                self.apply(Consume(taker, limit, own_position=open_[0] if own and open_ else None))
            case ("finish", taker, how):
                ids = tuple(self.held[taker])
                if ids:
                    command = {"complete": Complete, "fail": Fail, "untake": Untake}[how](taker, ids)
                    self.try_apply(command)
                    self.held[taker] = []
            case ("late-complete", taker):
                self.try_apply(Complete(taker, tuple(self.held[taker])))
            case ("advance", seconds):
                self.now += timedelta(seconds=seconds)

    def try_apply(self, command: object) -> None:
        try:
            self.apply(command)
        except FailedPrecondition:
            pass  # the taker lost its partitions to a timeout and another taker: its work does not count

    def drain(self) -> None:
        for position in self.open_positions():
            self.index.commit(position, partition("UK", next(self.hours)), at=self.now)
        for _ in range(10_000):
            for taker, ids in self.held.items():
                if ids:
                    self.try_apply(Complete(taker, tuple(ids)))
                    self.held[taker] = []
            self.apply(Consume("drain", 1_000))
            self.try_apply(Complete("drain", tuple(self.held.pop("drain", []))))
            if not self.state.working_set and not self.state.in_flight \
                    and self.state.high_water_mark == len(self.index.transactions):
                return
            self.now += timedelta(seconds=120)
        raise AssertionError("the consumer never drained")


@settings(max_examples=300)
@given(configs, operations)
def test_every_partition_is_completed_once_or_discarded_and_none_is_missed(config, steps):
    run = Run(config)
    for operation in steps:
        run.step(operation)
    run.drain()
    committed = {PartitionId(t.position, i) for t in run.index.transactions
                 if t.status is TransactionStatus.COMMITTED for i in range(len(t.partitions))}
    assert set(run.completed) | run.discarded == committed
    assert not set(run.completed) & run.discarded
    assert all(count == 1 for count in run.completed.values())
