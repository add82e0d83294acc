"""The result.json and consumed.json a program leaves in its run dir are its own, so hostile: read
without following a link, never waited on (a FIFO), at most MAX_RESULT_BYTES."""
from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from sluice.datasets.files import MAX_RESULT_BYTES, PublishError, read_result


def read_in_a_thread(path: Path) -> tuple[bool, object]:
    """(whether read_result hung, what it returned or raised); a hung read is let go by opening the FIFO."""
    outcome: list[object] = []

    def read() -> None:
        try:
            outcome.append(read_result(path))
        except Exception as error:
            outcome.append(error)
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(5)
    hung = reader.is_alive()
    if hung:
        with open(path, "w") as writer:
            writer.write("{}")
        reader.join(5)
    return hung, outcome[0] if outcome else None


def test_a_result_the_program_made_a_fifo_is_refused_without_waiting(tmp_path):
    """Regression: the launcher opened it on its event loop and waited for a writer forever."""
    result = tmp_path / "result.json"
    os.mkfifo(result)
    hung, outcome = read_in_a_thread(result)
    assert not hung
    assert isinstance(outcome, PublishError) and "not a regular file" in str(outcome)


def test_a_result_the_program_made_a_link_is_not_followed(tmp_path):
    (tmp_path / "elsewhere.json").write_text('{"outputs": []}')
    (tmp_path / "result.json").symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(PublishError, match="cannot be read"):
        read_result(tmp_path / "result.json")


def test_a_result_over_the_limit_is_refused_unread(tmp_path):
    result = tmp_path / "result.json"
    with open(result, "wb") as out:
        out.truncate(16 << 30)  # sparse: read whole, it would take 16 GiB
    with pytest.raises(PublishError, match=f"over the limit of {MAX_RESULT_BYTES:,} bytes"):
        read_result(result)


def test_a_missing_result_says_so(tmp_path):
    with pytest.raises(PublishError, match="wrote no result"):
        read_result(tmp_path / "result.json")
