"""consume: the partition consumer's cost does not grow with the partitions a dataset already has.

Two SQLite file logs, each with a dataset and a consumer that has consumed (and completed)
everything in it: one dataset is empty, the other holds P partitions (default 1,000,000, written as
transactions of 1,000). Then, per round, N new partitions arrive (default 1,000, one transaction
each, the hardest case: one index lookup per partition) in both, and a taker in a new process-like
setting (a fresh log connection and fresh stores: the consumer is loaded from its snapshot) consumes
all N (limit N per call) and completes them. Only that is timed.

Figures (each the median of ROUNDS rounds, alternating the two datasets):
- consume_new_on_empty_ms: N new partitions on the empty dataset.
- consume_new_on_large_ms: N new partitions on the dataset with P partitions.
- large_to_empty_ratio: the second over the first (target 1.5).

Building the large dataset and consuming its P partitions once takes a while (4-5 minutes at the
default size on a 2-core machine); it is built once per process and reused by the harness's
repeated runs. BENCH_PARTITIONS sets P, BENCH_NEW_PARTITIONS sets N.
"""
from __future__ import annotations

import atexit
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench import Figure, option, progress
from sluice.clock import SystemClock
from sluice.datasets import ConsumerStore, DatasetStore
from sluice.domain.consumer import ConsumerConfig, ConsumerRef
from sluice.domain.datasets import DatasetSpec, KeySpec, KeyType, Partition
from sluice.eventlog.sqlite import SqliteEventLog

DESCRIPTION = "consume N new partitions with 1,000,000 existing vs an empty dataset (SQLite file log): ms, ratio"
DEFAULT_PARTITIONS = 1_000_000
DEFAULT_NEW = 1_000
EXISTING_PER_TRANSACTION = 1_000
ROUNDS = 5
TARGET_RATIO = 1.5
SPEC = DatasetSpec("bench", "events", (KeySpec("source"), KeySpec("seq", KeyType.INT)), "/data/bench/events")
CONSUMER = ConsumerRef("bench", "events", "reader")
CONFIG = ConsumerConfig(max_working_set=10_000)  # the most a consumer may hold (bounds.MAX_WORKING_SET)

_built: dict[int, "_Dataset"] = {}


@dataclass
class _Dataset:
    path: Path
    existing: int
    next_seq: int
    directory: tempfile.TemporaryDirectory


def run(options: object) -> list[Figure]:
    existing = option(options, "partitions", DEFAULT_PARTITIONS)
    new = option(options, "new_partitions", DEFAULT_NEW)
    empty, large = _dataset(0), _dataset(existing)
    on_empty, on_large = [], []
    for round_ in range(ROUNDS):
        on_empty.append(_consume_new(empty, new))
        on_large.append(_consume_new(large, new))
        progress(f"[consume] round {round_ + 1}/{ROUNDS}: {on_empty[-1] * 1000:.1f} ms empty, "
                 f"{on_large[-1] * 1000:.1f} ms with {existing} existing")
    empty_ms, large_ms = statistics.median(on_empty) * 1000, statistics.median(on_large) * 1000
    return [Figure("consume_new_on_empty_ms", empty_ms, "ms"),
            Figure("consume_new_on_large_ms", large_ms, "ms"),
            Figure("large_to_empty_ratio", large_ms / empty_ms, "x", TARGET_RATIO)]


def _clean_up() -> None:
    for dataset in _built.values():
        dataset.directory.cleanup()
    _built.clear()


atexit.register(_clean_up)


def _dataset(existing: int) -> _Dataset:
    if existing not in _built:
        directory = tempfile.TemporaryDirectory(prefix="sluice-bench-consume-")
        path = Path(directory.name) / "events.db"
        started = time.perf_counter()
        clock = SystemClock()
        log = SqliteEventLog(path, clock=clock)
        datasets = DatasetStore(log, clock)
        datasets.create(SPEC)
        for first in range(0, existing, EXISTING_PER_TRANSACTION):
            count = min(EXISTING_PER_TRANSACTION, existing - first)
            datasets.add(SPEC.namespace, SPEC.name, [_partition(seq) for seq in range(first, first + count)])
        consumers = ConsumerStore(log, datasets, clock)
        consumers.create(CONSUMER, CONFIG)
        _drain(consumers, "setup", CONFIG.max_working_set)
        log.close()
        progress(f"[consume] built a dataset of {existing} partitions and consumed them in "
                 f"{time.perf_counter() - started:.1f} s")
        _built[existing] = _Dataset(path, existing, existing, directory)
    return _built[existing]


def _consume_new(dataset: _Dataset, new: int) -> float:
    clock = SystemClock()
    writer = SqliteEventLog(dataset.path, clock=clock)
    datasets = DatasetStore(writer, clock)
    for seq in range(dataset.next_seq, dataset.next_seq + new):
        datasets.add(SPEC.namespace, SPEC.name, [_partition(seq)])
    dataset.next_seq += new
    writer.close()

    started = time.perf_counter()
    log = SqliteEventLog(dataset.path, clock=clock)
    consumers = ConsumerStore(log, DatasetStore(log, clock), clock)
    consumed = _drain(consumers, f"taker-{dataset.next_seq}", new)
    elapsed = time.perf_counter() - started
    log.close()
    if consumed != new:
        raise RuntimeError(f"consumed {consumed} partitions, expected {new}")
    return elapsed


def _drain(consumers: ConsumerStore, taker: str, limit: int) -> int:
    consumed = 0
    while items := consumers.consume(CONSUMER, taker, limit):
        consumers.complete(CONSUMER, taker, [item.id for item in items])
        consumed += len(items)
    return consumed


def _partition(seq: int) -> Partition:
    return Partition({"source": "web", "seq": str(seq)}, f"/data/bench/events/source=web/seq={seq}", 4096, 100)
