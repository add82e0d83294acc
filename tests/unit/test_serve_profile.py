import pstats

import pytest

from sluice.domain.errors import InvalidArgument
from sluice_services.cli.serve import _profiled


def _busy() -> None:
    sum(range(10_000))


@pytest.mark.parametrize("clock", ["wall", "cpu"])
def test_the_profile_of_the_run_is_written_under_its_label(tmp_path, monkeypatch, clock):
    monkeypatch.setenv("SLUICE_PROFILE_DIR", str(tmp_path / "profiles"))
    monkeypatch.setenv("SLUICE_PROFILE_CLOCK", clock)

    _profiled("matcher", _busy)

    stats = pstats.Stats(str(tmp_path / "profiles" / "matcher.pstats"))
    assert any(name == "_busy" for (_, _, name) in stats.stats)


def test_an_unknown_profile_clock_is_refused_before_the_run(tmp_path, monkeypatch):
    monkeypatch.setenv("SLUICE_PROFILE_DIR", str(tmp_path))
    monkeypatch.setenv("SLUICE_PROFILE_CLOCK", "gpu")
    ran = []

    with pytest.raises(InvalidArgument, match="SLUICE_PROFILE_CLOCK"):
        _profiled("matcher", lambda: ran.append(True))

    assert ran == []
