"""The console's backfills page reads every page of the paged Jobs.ListBackfills, then shows them newest first."""
from __future__ import annotations

from sluice.v1 import jobs_pb2
from sluice_services.web import pages


class PagedApi:
    """ListBackfills in pages of two: b0..b4, oldest first."""

    def __init__(self) -> None:
        self.tokens: list[str] = []

    def call(self, token, service, method, request):
        self.tokens.append(request.page_token)
        start = int(request.page_token or 0)
        ids = [f"b{n}" for n in range(start, min(start + 2, 5))]
        return jobs_pb2.ListBackfillsResponse(backfills=[jobs_pb2.Backfill(id=i) for i in ids],
                                              next_page_token=str(start + 2) if start + 2 < 5 else "")


def test_every_api_page_is_read_and_the_newest_shown_first():
    api = PagedApi()
    shown = pages.backfills(api, "token", None, {"page_size": "3"})
    assert api.tokens == ["", "2", "4"]
    assert [row["backfill"].id for row in shown["rows"]] == ["b4", "b3", "b2"] and shown["next_token"] == "3"
