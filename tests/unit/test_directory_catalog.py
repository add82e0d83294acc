"""Issue 23, hole 2: app and program names cannot make DirectoryCatalog reach outside --apps-dir."""
from __future__ import annotations

from pathlib import Path

import pytest

from sluice.domain.common import ProgramRef
from sluice.domain.errors import InvalidArgument
from sluice_services.launcher.programs import DirectoryCatalog


@pytest.fixture
def apps(tmp_path: Path) -> Path:
    (tmp_path / "apps" / "clickstream").mkdir(parents=True)
    (tmp_path / "apps" / "clickstream" / "hourly_metrics.py").write_text("print('deployed')\n")
    (tmp_path / "evil").mkdir()
    (tmp_path / "evil" / "x.py").write_text("print('not deployed')\n")
    (tmp_path / "x.py").write_text("print('not deployed')\n")
    return tmp_path / "apps"


def test_a_deployed_program_is_found(apps: Path) -> None:
    assert DirectoryCatalog(apps).entry_point(ProgramRef("ns", "clickstream", "hourly_metrics")) \
        == apps / "clickstream" / "hourly_metrics.py"
    assert DirectoryCatalog(apps).entry_point(ProgramRef("ns", "clickstream", "missing")) is None


@pytest.mark.parametrize("app, program, field", [
    ("..", "x", "program.app"),                    # <apps>/../x.py
    ("../evil", "x", "program.app"),
    ("/tmp", "x", "program.app"),
    ("ABSOLUTE", "x", "program.app"),              # an absolute path to a directory holding x.py
    ("clickstream", "../../x", "program.program"),
    ("clickstream", "../x", "program.program"),
])
def test_app_and_program_names_cannot_leave_the_apps_dir(apps: Path, app: str, program: str, field: str) -> None:
    if app == "ABSOLUTE":
        app = str(apps.parent / "evil")
    with pytest.raises(InvalidArgument) as refused:
        DirectoryCatalog(apps).entry_point(ProgramRef("ns", app, program))
    assert refused.value.field == field


def test_a_symlink_out_of_the_apps_dir_is_refused(apps: Path) -> None:
    (apps / "clickstream" / "linked.py").symlink_to(apps.parent / "x.py")
    with pytest.raises(InvalidArgument, match="outside"):
        DirectoryCatalog(apps).entry_point(ProgramRef("ns", "clickstream", "linked"))
