"""A short fault campaign in `make test`: one fault of each kind (PostgreSQL stopped 5 s, a broker killed,
the event log's disk full, a service SIGSTOPped past its Kafka session timeout, a launcher's host dying
and another launcher taking over) on the real stack, in a seeded order. Nothing lost, run twice or
dead-lettered, and launches flow again after every fault.

The seed is printed; SLUICE_FAULT_SEED=<seed> repeats the order."""
from __future__ import annotations

import os
import random

import pytest

from tests.faults import campaign
from tests.faults.kinds import KINDS, SHORT

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(900)]  # as the kill test: a loaded 2-core machine


def test_one_fault_of_each_kind_loses_duplicates_and_dead_letters_nothing(tmp_path):
    seed = int(os.environ.get("SLUICE_FAULT_SEED") or random.SystemRandom().randrange(1 << 32))
    print(f"fault test seed: {seed} (SLUICE_FAULT_SEED={seed} repeats it)")
    outcome = campaign.run(tmp_path / "faults", seed, rounds=1, timing=SHORT, gap=(1.0, 2.0), drain_timeout=180)
    print(outcome.line())
    assert sorted(applied.kind for applied in outcome.applied) == sorted(KINDS)
    assert outcome.accepted > 0
    assert not outcome.problems, outcome.problems
    assert (outcome.lost, outcome.duplicate, outcome.dead_letters) == ([], [], []), outcome.line()
    assert all(recovery is not None for recovery in outcome.recoveries)
