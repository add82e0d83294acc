"""`schedules list` and `apps list` read every page: the client follows next_page_token to the end."""
from __future__ import annotations

from sluice.cli.apps import list_apps
from sluice.client import SluiceClient
from sluice.v1 import schedules_pb2 as spb


class PagedRegistry:
    """Three pages of one item each, chained by tokens, as the registry answers with page_size 1."""

    def __init__(self) -> None:
        self.tokens: list[str] = []

    def ListSchedules(self, request, timeout):
        self.tokens.append(request.page_token)
        index = int(request.page_token or 0)
        return spb.ListSchedulesResponse(schedules=[spb.Schedule(name=f"s{index}")],
                                         next_page_token=str(index + 1) if index < 2 else "")

    def ListApps(self, request, timeout):
        self.tokens.append(request.page_token)
        index = int(request.page_token or 0)
        return spb.ListAppsResponse(apps=[spb.App(namespace=request.namespace, app=f"a{index}")],
                                    next_page_token=str(index + 1) if index < 2 else "")


def client_of(registry: PagedRegistry) -> SluiceClient:
    client = SluiceClient("127.0.0.1:1")
    client.schedules = registry
    return client


def test_schedules_list_follows_every_page():
    registry = PagedRegistry()
    with client_of(registry) as client:
        assert [s.name for s in client.list_schedules("experiments")] == ["s0", "s1", "s2"]
    assert registry.tokens == ["", "1", "2"]


def test_apps_list_follows_every_page():
    registry = PagedRegistry()
    with client_of(registry) as client:
        assert [a.app for a in list_apps(client, "experiments")] == ["a0", "a1", "a2"]
    assert registry.tokens == ["", "1", "2"]
