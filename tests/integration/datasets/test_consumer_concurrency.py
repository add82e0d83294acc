"""Concurrent writers whose transactions commit out of order, and several takers sharing a consumer
with random failures, retries and timeouts, on real event logs (a SQLite file, a PostgreSQL server):
every committed partition is completed exactly once or discarded after its retries, none is missed.

Two ways: hypothesis picks the interleaving (each writer and taker on its own connection, a
simulated clock for timeouts), and real threads race each other (the system clock, 1 s timeouts).
Either way the ground truth is the log itself: the consumer's PartitionsCompleted and
PartitionsDiscarded events against the PartitionsCommitted of the dataset.
"""
from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections import Counter
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.clock import SimulatedClock, SystemClock
from sluice.datasets import ConsumerStore, DatasetStore
from sluice.domain.consumer import ConsumerConfig, ConsumerRef, PartitionId, consumer_stream
from sluice.domain.datasets import DatasetSpec, KeySpec, KeyType, Partition, TransactionStatus
from sluice.eventlog.port import EventLog
from sluice.domain.errors import FailedPrecondition
from tests.integration.datasets.backends import Backend, PostgresBackend, SqliteBackend

pytestmark = pytest.mark.integration

WRITERS = 3
TAKERS = ("a", "b", "c")


def new_dataset(datasets: DatasetStore) -> DatasetSpec:
    spec = DatasetSpec("conc", f"d{uuid.uuid4().hex[:12]}", (KeySpec("writer"), KeySpec("n", KeyType.INT)), "/data")
    return datasets.create(spec)


def outcome(log: EventLog, spec: DatasetSpec, ref: ConsumerRef) -> tuple[set, Counter, set]:
    """(committed ids, completions per id, discarded ids) as the log records them."""
    datasets = DatasetStore(log, SystemClock())
    committed = {PartitionId(t.position, i)
                 for t in datasets.transactions(spec.namespace, spec.name,
                                                range(datasets.next_position(spec.namespace, spec.name)))
                 if t.status is TransactionStatus.COMMITTED for i in range(len(t.partitions))}
    completed: Counter[PartitionId] = Counter()
    discarded: set[PartitionId] = set()
    for recorded in log.read_stream(consumer_stream(ref)):
        if recorded.type in ("PartitionsCompleted", "PartitionsDiscarded"):
            ids = [PartitionId(p["position"], p["index"]) for p in json.loads(recorded.data)["partitions"]]
            if recorded.type == "PartitionsCompleted":
                completed.update(ids)
            else:
                discarded |= set(ids)
    return committed, completed, discarded


def assert_exactly_once(committed: set, completed: Counter, discarded: set) -> None:
    assert committed, "the run committed nothing: the test proves nothing"
    assert set(completed) | discarded == committed, "missed (or invented) partitions"
    assert not set(completed) & discarded
    assert all(count == 1 for count in completed.values()), "a partition was completed twice"


steps = st.lists(st.one_of(
    st.tuples(st.just("begin"), st.integers(0, WRITERS - 1)),
    st.tuples(st.just("commit"), st.integers(0, WRITERS - 1), st.integers(0, 9), st.integers(1, 3)),
    st.tuples(st.just("abort"), st.integers(0, WRITERS - 1), st.integers(0, 9)),
    st.tuples(st.just("consume"), st.sampled_from(TAKERS), st.integers(1, 4)),
    st.tuples(st.just("finish"), st.sampled_from(TAKERS), st.sampled_from(("complete", "fail", "untake"))),
    st.tuples(st.just("advance"), st.integers(1, 90)),
), min_size=5, max_size=40)


class ConsumerConcurrencyContract(Backend):
    examples = 25

    def test_interleaved_writers_and_takers(self) -> None:
        clock = SimulatedClock()
        writer_logs = [self.open_log(clock) for _ in range(WRITERS)]
        taker_logs = {taker: self.open_log(clock) for taker in TAKERS}

        @settings(max_examples=self.examples, deadline=None,
                  suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
        @given(steps, st.integers(1, 5), st.integers(0, 2), st.sampled_from((0, 60)))
        def run(operations, max_working_set, max_retries, timeout):
            writers = [DatasetStore(log, clock) for log in writer_logs]
            spec = new_dataset(writers[0])
            ref = ConsumerRef(spec.namespace, spec.name, "shared")
            config = ConsumerConfig(max_working_set=max_working_set, max_retries=max_retries,
                                    timeout_seconds=timeout)
            takers = {t: ConsumerStore(log, DatasetStore(log, clock), clock, snapshot_every=4)
                      for t, log in taker_logs.items()}
            open_: list[list[int]] = [[] for _ in range(WRITERS)]
            held: dict[str, list[PartitionId]] = {t: [] for t in TAKERS}
            numbers = iter(range(1_000_000))

            def commit(writer: int, position: int, count: int) -> None:
                parts = [Partition({"writer": str(writer), "n": str(next(numbers))}, "/data/x") for _ in range(count)]
                writers[writer].commit(spec.namespace, spec.name, position, parts)

            for operation in operations:
                match operation:
                    case ("begin", w):
                        open_[w].append(writers[w].begin(spec.namespace, spec.name, owner=f"w{w}"))
                    case ("commit", w, k, n) if open_[w]:
                        commit(w, open_[w].pop(k % len(open_[w])), n)
                    case ("abort", w, k) if open_[w]:
                        writers[w].abort(spec.namespace, spec.name, open_[w].pop(k % len(open_[w])), "test")
                    case ("consume", t, limit):
                        held[t] += [i.id for i in takers[t].consume(ref, t, limit, config=config)]
                    case ("finish", t, how) if held[t]:
                        store = takers[t]
                        try:
                            {"complete": store.complete, "fail": store.fail, "untake": store.untake}[how](
                                ref, t, held[t])
                        except FailedPrecondition:
                            pass   # lost to a timeout and another taker
                        held[t] = []
                    case ("advance", seconds):
                        clock.advance(timedelta(seconds=seconds))
            for w in range(WRITERS):   # the writers finish: every open transaction commits
                for position in open_[w]:
                    commit(w, position, 1)
            drain = takers["a"]
            for _ in range(1000):
                clock.advance(timedelta(seconds=61))   # whatever is still held times out
                items = drain.consume(ref, "drain", 1000, config=config)
                drain.complete(ref, "drain", [i.id for i in items])
                state = drain.state(ref)
                if not state.working_set and not state.in_flight \
                        and state.high_water_mark == writers[0].next_position(spec.namespace, spec.name):
                    break
                if not items:
                    for t in TAKERS:   # a consumer without timeouts waits for its takers
                        try:
                            drain.complete(ref, t, held[t])
                        except FailedPrecondition:
                            pass   # lost to a timeout meanwhile
                        held[t] = []
            committed, completed, discarded = outcome(writer_logs[0], spec, ref)
            if committed:
                assert_exactly_once(committed, completed, discarded)

        run()

    def test_threads_racing_with_failures_and_timeouts(self) -> None:
        clock = SystemClock()
        setup = DatasetStore(self.open_log(clock), clock)
        spec = new_dataset(setup)
        ref = ConsumerRef(spec.namespace, spec.name, "shared")
        config = ConsumerConfig(max_working_set=20, max_retries=2, timeout_seconds=1)
        writers_done = threading.Event()
        errors: list[BaseException] = []
        per_writer = 12

        def writer(number: int) -> None:
            rng = random.Random(number)
            store = DatasetStore(self.open_log(clock), clock)
            open_positions: list[int] = []
            made = 0
            while made < per_writer or open_positions:
                if made < per_writer and (not open_positions or rng.random() < 0.5):
                    open_positions.append(store.begin(spec.namespace, spec.name, owner=f"w{number}"))
                    made += 1
                else:   # commit (or abort) a random open one: out of order with the other writers
                    position = open_positions.pop(rng.randrange(len(open_positions)))
                    if rng.random() < 0.1:
                        store.abort(spec.namespace, spec.name, position, "writer gave up")
                    else:
                        parts = [Partition({"writer": str(number), "n": f"{position}{k}"}, "/data/x")
                                 for k in range(rng.randint(1, 3))]
                        store.commit(spec.namespace, spec.name, position, parts)
                time.sleep(rng.uniform(0, 0.01))

        def taker(name: str) -> None:
            rng = random.Random(name)
            log = self.open_log(clock)
            store = ConsumerStore(log, DatasetStore(log, clock), clock, snapshot_every=16)
            idle_rounds = 0
            while idle_rounds < 30:
                items = store.consume(ref, name, rng.randint(1, 4), config=config)
                idle_rounds = 0 if items or not writers_done.is_set() else idle_rounds + 1
                for item in items:
                    roll = rng.random()
                    try:
                        if roll < 0.65:
                            store.complete(ref, name, [item.id])
                        elif roll < 0.85:
                            store.fail(ref, name, [item.id], "random failure")
                        elif roll < 0.95:
                            store.untake(ref, name, [item.id])
                        # else: the taker "hangs" on it; the timeout hands it to someone else
                    except FailedPrecondition:
                        pass
                time.sleep(0.02 if items else 0.1)

        def guarded(target, *args):
            def body():
                try:
                    target(*args)
                except BaseException as error:  # surfaced below
                    errors.append(error)
            return threading.Thread(target=body)

        writer_threads = [guarded(writer, n) for n in range(WRITERS)]
        taker_threads = [guarded(taker, name) for name in TAKERS]
        for thread in writer_threads + taker_threads:
            thread.start()
        for thread in writer_threads:
            thread.join(60)
        writers_done.set()
        for thread in taker_threads:
            thread.join(120)
        assert not errors, errors
        state = ConsumerStore(self.open_log(clock), setup, clock).state(ref)
        assert not state.working_set and not state.in_flight
        assert_exactly_once(*outcome(self.open_log(clock), spec, ref))


class TestSqliteConsumerConcurrency(SqliteBackend, ConsumerConcurrencyContract):
    examples = 100


class TestPostgresConsumerConcurrency(PostgresBackend, ConsumerConcurrencyContract):
    examples = 40
