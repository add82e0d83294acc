"""The console's run-log view (pages.run_log): its first view asks StreamRunLog for the log's last lines
(tail_lines) instead of streaming the whole log, and a poll goes on from the offset the view ended at."""
from __future__ import annotations

import os

from sluice.v1 import runs_pb2
from sluice_services.launcher.run_logs import CHUNK_BYTES, tail_offset
from sluice_services.web import pages


class FileLogApi:
    """StreamRunLog over a real file, answered as the launcher does (a tail from tail_offset); records
    the requests and the bytes it streamed."""

    def __init__(self, path) -> None:
        self.path, self.requests, self.streamed = path, [], 0

    def call(self, token, service, method, request):
        return runs_pb2.Run(id=request.id)  # going: no ended_at

    def stream(self, token, service, method, request):
        self.requests.append(request)
        fd = os.open(self.path, os.O_RDONLY)
        try:
            offset = tail_offset(fd, request.tail_lines) if request.tail_lines else request.from_offset
            while data := os.pread(fd, CHUNK_BYTES, offset):
                self.streamed += len(data)
                yield runs_pb2.RunLogChunk(attempt=1, offset=offset, data=data)
                offset += len(data)
        finally:
            os.close(fd)


def test_the_first_view_of_a_long_log_asks_for_its_last_lines_and_a_poll_goes_on_from_its_end(tmp_path):
    path = tmp_path / "driver.log"
    path.write_bytes(b"".join(f"line {n} ✓\n".encode() for n in range(200_000)))
    api = FileLogApi(path)
    first = pages.run_log(api, "token", "run-1", {})
    assert api.requests[0].tail_lines == pages.LOG_TAIL_LINES and api.requests[0].from_offset == 0
    shown = first["text"].splitlines()
    assert shown[0] == f"line {200_000 - pages.LOG_TAIL_LINES} ✓" and shown[-1] == "line 199999 ✓"
    assert len(shown) == pages.LOG_TAIL_LINES and first["cut"] and first["going"]
    assert first["next"] == path.stat().st_size and api.streamed < path.stat().st_size / 50
    with path.open("ab") as log:
        log.write("one more ✓\n".encode())
    poll = pages.run_log(api, "token", "run-1", {"from": str(first["next"])})
    assert api.requests[1].tail_lines == 0 and api.requests[1].from_offset == first["next"]
    assert poll["text"] == "one more ✓\n" and not poll["cut"] and poll["next"] == path.stat().st_size


def test_a_short_log_is_shown_whole_and_not_marked_cut(tmp_path):
    path = tmp_path / "driver.log"
    path.write_text("hello\nworld\n")
    shown = pages.run_log(FileLogApi(path), "token", "run-1", {})
    assert shown["text"] == "hello\nworld\n" and not shown["cut"] and shown["next"] == 12


def test_an_empty_log_polls_from_its_start(tmp_path):
    path = tmp_path / "driver.log"
    path.write_bytes(b"")
    shown = pages.run_log(FileLogApi(path), "token", "run-1", {})
    assert shown["text"] == "" and shown["next"] == 0 and not shown["cut"]
