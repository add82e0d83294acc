"""The console's HTTP side against a stand-in API (authorization off): where an action sends the browser
back to stays on the console."""
from __future__ import annotations

import re

import pytest
from aiohttp.test_utils import TestClient, TestServer

from sluice_services.web.api import Identity
from sluice_services.web.app import build_app


class ActionsApi:
    """Authorization off; records the actions' calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def whoami(self, token):
        return Identity("anonymous", False)

    def call(self, token, service, method, request):
        self.calls.append((service, method))


async def confirmed(client: TestClient, back: str) -> tuple[str, str]:
    """The confirm page's Cancel link and where confirming the replay of dead letter 0/1 redirects."""
    page = await (await client.get("/confirm/replay/0/1", params={"back": back})).text()
    cancel = re.search(r'<a href="([^"]*)" id="cancel">', page).group(1)
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page).group(1)
    done = await client.post("/actions/replay/0/1", data={"csrf": csrf, "back": back}, allow_redirects=False)
    assert done.status == 303
    return cancel, done.headers["Location"]


@pytest.mark.parametrize("back", ["/\t/evil.example", "/\n/evil.example", "/\r\n/evil.example", "/ /evil.example",
                                  "//evil.example", "https://evil.example/", "/\\evil.example"])
async def test_an_action_never_sends_the_browser_off_the_console(back):
    """A browser drops tabs and newlines from a URL: "/<tab>/evil.example" is "//evil.example" to it."""
    api = ActionsApi()
    async with TestClient(TestServer(build_app(api))) as client:
        assert await confirmed(client, back) == ("/schedules", "/schedules")
    assert api.calls == [("DeadLetters", "ReplayDeadLetter")]


async def test_an_action_sends_the_browser_back_to_the_console_page_it_came_from():
    async with TestClient(TestServer(build_app(ActionsApi()))) as client:
        assert await confirmed(client, "/dead-letters?topic=sluice.jobs") == ("/dead-letters?topic=sluice.jobs",) * 2
