"""The crash subset with snapshots every few events: every restart then recovers from a base and a
delta (or a base whose delta went stale) and the log after them, and must change nothing the oracle
decided."""
from __future__ import annotations

from collections import Counter

import pytest

from sluice.runtime import aggregates, snapshots
from sluice.runtime.map_snapshots import MapSnapshots
from tests.crash.sweep import sweep
from tests.crash.test_crash_subset import PER_RUN, SEED, WORKLOAD, _Backend, _failures

SNAPSHOT_EVERY = 5


@pytest.mark.parametrize("background", [False, True], ids=["on-the-loop", "on-the-snapshot-thread"])
async def test_seeded_crashes_with_frequent_incremental_snapshots_change_nothing(tmp_path, monkeypatch, background):
    """On the snapshot thread (as stores of thousands of streams do), snapshots also find and fold
    the streams that moved there, while the services go on."""
    monkeypatch.setattr(snapshots, "SNAPSHOT_EVERY", SNAPSHOT_EVERY)
    if background:
        monkeypatch.setattr(aggregates, "BACKGROUND_SNAPSHOT_STREAMS", 1)
    written, write = Counter(), MapSnapshots.write

    def counting_write(self, pending, pace=None):
        written["base" if pending.base is not None else "delta"] += 1
        return write(self, pending, pace)

    monkeypatch.setattr(MapSnapshots, "write", counting_write)
    backend = _Backend("sqlite")
    run_seeds = [SEED * 1000 + 500 + i for i in range(5)]
    report = await sweep(backend, WORKLOAD, tmp_path, points=0, per_run=PER_RUN, seed=SEED, run_seeds=run_seeds)
    assert report.oracle_launches > 20 and report.runs, report.summary()
    assert not report.failed, _failures(report)
    assert written["delta"] > 10 and written["base"] > 10, written
