"""What the supervise wrapper leaves in an attempt's directory (`spawned`, `exit_code`) is read back by the
launcher, on its event loop; the program can write that directory too. A FIFO there must not block the
launcher, and a link is not followed."""
from __future__ import annotations

import os

import pytest

from sluice_services.launcher.supervise import EXIT_CODE, SPAWNED
from sluice_services.launcher.tracking import ProcessIdentity, exit_code, spawned


def test_the_wrappers_files_are_read(tmp_path):
    (tmp_path / SPAWNED).write_text("4242 123456\n")
    (tmp_path / EXIT_CODE).write_text("3")
    assert spawned(tmp_path) == ProcessIdentity(4242, 123456)
    assert exit_code(tmp_path) == 3


@pytest.mark.timeout(10)
@pytest.mark.parametrize("name", [SPAWNED, EXIT_CODE])
def test_a_fifo_in_place_of_a_wrapper_file_reads_as_none_without_waiting(tmp_path, name):
    os.mkfifo(tmp_path / name)
    assert (spawned if name == SPAWNED else exit_code)(tmp_path) is None


@pytest.mark.parametrize("name, content", [(SPAWNED, "1 1"), (EXIT_CODE, "0")])
def test_a_link_in_place_of_a_wrapper_file_is_not_followed(tmp_path, name, content):
    elsewhere = tmp_path.parent / f"{tmp_path.name}-elsewhere"
    elsewhere.write_text(content)
    (tmp_path / name).symlink_to(elsewhere)
    assert (spawned if name == SPAWNED else exit_code)(tmp_path) is None
