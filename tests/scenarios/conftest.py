from datetime import datetime, timezone

import pytest

from tests.support.simulated import SimulatedScheduler

T0 = datetime(2026, 11, 22, 0, 0, tzinfo=timezone.utc)


@pytest.fixture
def scheduler(tmp_path):
    simulated = SimulatedScheduler(tmp_path, T0)
    yield simulated
    simulated.close()
