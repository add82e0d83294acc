"""The console's filtered listing (pages._scan): it reads API pages until its page is full, the API's
listing ends, SCAN_PAGES pages were read or SCAN_SECONDS were spent, and answers the token to go on
from; on a simulated clock."""
from __future__ import annotations

from sluice_services.web import pages


class Listing:
    """An API listing of 0..count-1 in pages; each fetch moves the simulated clock by `cost`."""

    def __init__(self, count: int, cost: float = 0.0) -> None:
        self.count, self.cost, self.now, self.fetches = count, cost, 0.0, 0

    def fetch(self, token: str, size: int) -> tuple[list[int], str]:
        self.fetches += 1
        self.now += self.cost
        start = int(token or 0)
        end = min(self.count, start + size)
        return list(range(start, end)), str(end) if end < self.count else ""

    def clock(self) -> float:
        return self.now


def test_a_page_fills_from_further_api_pages_and_says_where_to_go_on():
    listing = Listing(1_000)
    found, token = pages._scan(listing.fetch, {"page_size": "5"}, lambda n: n % 7 == 0, listing.clock)
    assert found == [0, 7, 14, 21, 28] and token == "30" and listing.fetches == 6
    again, _ = pages._scan(listing.fetch, {"page_size": "5", "page_token": token}, lambda n: n % 7 == 0, listing.clock)
    assert again[0] == 35


def test_the_end_of_the_listing_ends_the_scan_with_no_token():
    listing = Listing(12)
    assert pages._scan(listing.fetch, {"page_size": "5"}, lambda n: n > 10, listing.clock) == ([11], "")


def test_at_most_scan_pages_are_read():
    listing = Listing(100_000)
    found, token = pages._scan(listing.fetch, {"page_size": "5"}, lambda n: False, listing.clock)
    assert found == [] and listing.fetches == pages.SCAN_PAGES and token == str(5 * pages.SCAN_PAGES)


def test_no_api_page_is_read_once_the_time_budget_is_spent():
    listing = Listing(100_000, cost=pages.SCAN_SECONDS / 2.5)
    found, token = pages._scan(listing.fetch, {"page_size": "5"}, lambda n: False, listing.clock)
    assert found == [] and listing.fetches == 3 and token == "15"


class _LogApi:
    """Records the StreamRunLog request a run page sends; the run has ended and its log is empty."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    def call(self, token, service, method, request):
        from sluice.v1 import runs_pb2
        return runs_pb2.Run(id=request.id)

    def stream(self, token, service, method, request):
        self.asked.append(request.from_offset)
        return iter(())


def test_a_log_offset_beyond_int64_in_the_url_is_read_as_the_end_not_an_error():
    api = _LogApi()
    shown = pages.run_log(api, "token", "run-1", {"from": str(10**30)})
    assert api.asked == [pages.MAX_LOG_OFFSET] and shown["text"] == ""
    pages.run_log(api, "token", "run-1", {"from": "-5"})
    assert api.asked[-1] == 0
