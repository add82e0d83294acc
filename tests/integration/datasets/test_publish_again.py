"""A launcher that stopped after publishing a run's outputs but before recording its completion:
the next one publishes the same result again and gets the same outputs, nothing moved twice."""
from __future__ import annotations

import pytest

from sluice.datasets import PartitionQuery
from sluice.domain.common import RunStatus
from sluice.datasets.files import read_result
from tests.integration.datasets.test_launcher_runs import Harness, counting_program, harness  # noqa: F401 (fixture)

pytestmark = pytest.mark.integration


async def test_publishing_a_published_result_again_returns_the_same_outputs(harness: Harness, tmp_path):
    harness.add_clicks(3)
    _, run = await harness.run(counting_program())
    assert run.status is RunStatus.COMPLETED, run.error
    result = read_result(tmp_path / "runs" / run.id / "result.json")
    assert harness.publisher.publish(run.id, result) == run.outputs
    assert len(harness.plane.datasets.query("web", "click_counts", PartitionQuery())) == 1
