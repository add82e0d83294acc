"""The console's run page: its Spark application and UI link, and its run-log view (pages.run_log): its first view asks StreamRunLog for the log's last lines
(tail_lines) instead of streaming the whole log, and a poll goes on from the offset the view ended at."""
from __future__ import annotations

import os

from sluice.v1 import runs_pb2
from sluice_services.launcher.run_logs import CHUNK_BYTES, tail_offset
from sluice_services.web import pages, present
from sluice_services.web.api import Identity
from sluice_services.web.app import TEMPLATES_KEY, build_app


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


class SparkRunApi(FileLogApi):
    """A run on a Spark cluster: its application id and driver UI as the launcher reports them."""

    def __init__(self, path, ui_url: str, ended: bool = False) -> None:
        super().__init__(path)
        self.ui_url, self.ended = ui_url, ended

    def call(self, token, service, method, request):
        run = runs_pb2.Run(id=request.id, spark_application_id="app-20261126190000-0003", spark_ui_url=self.ui_url)
        run.attempts.add(number=1, spark_application_id="app-20261126190000-0003", spark_ui_url=self.ui_url)
        if self.ended:
            run.ended_at.seconds = 1
        return run


def run_page(api) -> str:
    me = Identity(principal="token:ada", authorization=False)
    context = pages.run(api, "token", me, "run-1")
    return build_app(api)[TEMPLATES_KEY].get_template("run.html").render(
        csrf="x", path="/runs/run-1", signed_in=True, me=me, **context)


def test_a_going_cluster_run_shows_its_application_id_and_links_its_spark_ui(tmp_path):
    (tmp_path / "driver.log").write_text("started\n")
    html = run_page(SparkRunApi(tmp_path / "driver.log", "http://10.0.0.7:4040"))
    assert 'id="spark-application">app-20261126190000-0003' in html
    assert '<a href="http://10.0.0.7:4040" id="spark-ui"' in html
    assert html.count("app-20261126190000-0003") == 2  # and in its attempt's row


def test_an_ended_run_keeps_its_application_id_but_no_link_to_its_gone_ui(tmp_path):
    (tmp_path / "driver.log").write_text("done\n")
    html = run_page(SparkRunApi(tmp_path / "driver.log", "http://10.0.0.7:4040", ended=True))
    assert "app-20261126190000-0003" in html and 'id="spark-ui"' not in html


def test_a_reported_ui_address_becomes_a_link_only_if_it_is_http_with_a_host(tmp_path):
    (tmp_path / "driver.log").write_text("x\n")
    for hostile in ("javascript:alert(1)", "data:text/html,<script>", "http://", "//evil.example/", "http://[::1"):
        html = run_page(SparkRunApi(tmp_path / "driver.log", hostile))
        assert 'id="spark-ui"' not in html and "javascript:" not in html
    assert present.link_target("https://spark.internal:4040/jobs/") == "https://spark.internal:4040/jobs/"
