"""A few fuzz inputs per gRPC method, HTTP route and bus topic against a real `sluice standalone`
(the full run is `make fuzz`): no input may crash a service, and afterwards every service answers
health checks and a normal partition notification still fires a job."""
from __future__ import annotations

import os

import pytest

from tests.fuzz.runner import Fuzz

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

EXAMPLES = int(os.environ.get("SLUICE_FUZZ_SUBSET_EXAMPLES", "4"))
SEED = int(os.environ.get("SLUICE_FUZZ_SEED", "20231"))


def test_no_fuzz_input_crashes_a_service_and_the_server_still_works_afterwards(tmp_path):
    lines: list[str] = []
    code = Fuzz(tmp_path, EXAMPLES, SEED, log=lines.append).run()
    report = "\n".join(lines)
    assert lines[-1].startswith("fuzz: inputs=") and code == 0, report
