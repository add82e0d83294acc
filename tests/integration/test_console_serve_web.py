"""`sluice serve web`: the console as its own process, reading the services at the addresses it is
given (here all on one standalone), signing a user in with a token over plain HTTP on loopback; and
refusing to serve tokens in clear beyond loopback."""
from __future__ import annotations

import http.cookiejar
import os
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request

import grpc
import pytest

from sluice.v1 import schedules_pb2, schedules_pb2_grpc
from tests.support.console import ADMIN_TOKEN, READER_TOKEN, REPO, ConsoleServer, bearer

pytestmark = pytest.mark.integration


def serve_web(*args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen([sys.executable, "-m", "sluice_services.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def test_serve_web_reads_each_api_at_its_address_with_the_users_token(tmp_path):
    server = ConsoleServer(tmp_path).start()
    web = None
    try:
        with grpc.insecure_channel(server.address) as channel:
            schedules_pb2_grpc.ScheduleRegistryStub(channel).CreateSchedule(schedules_pb2.CreateScheduleRequest(
                schedule=schedules_pb2.Schedule(name="apart", program={"namespace": "web", "app": "a", "program": "p"},
                                                trigger={"time": {"cron": "0 3 * * *"}})), metadata=bearer(ADMIN_TOKEN))
        a = server.address
        web = serve_web("--server", "127.0.0.1:1", "serve", "web", "--web-port", "0", "--registry-server", a,
                        "--checker-server", a, "--datasets-server", a, "--launcher-server", a,
                        "--lineage-server", a, "--alerts-server", a)
        line = web.stdout.readline()
        assert line.startswith("sluice web ready on 127.0.0.1:"), line + web.stderr.read()
        base = "http://" + line.split(" ready on ")[1].split()[0]
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        login = opener.open(f"{base}/schedules")
        assert login.url == f"{base}/login"  # the servers want a token
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', login.read().decode()).group(1)
        page = opener.open(f"{base}/login", urllib.parse.urlencode({"csrf": csrf, "token": READER_TOKEN}).encode())
        html = page.read().decode()
        assert page.url == f"{base}/schedules" and "token:rita" in html and "apart" in html
        assert "every day at 03:00 UTC" in html
        for path in ("/jobs", "/runs", "/datasets", "/lineage", "/dead-letters", "/backfills", "/sla-misses"):
            assert opener.open(base + path).status == 200
        with pytest.raises(urllib.error.HTTPError) as refused:  # events hold data: operators and admins only
            opener.open(base + "/events")
        assert refused.value.code == 403 and "lacks log.read" in refused.value.read().decode()
        jar = [h for h in opener.handlers if isinstance(h, urllib.request.HTTPCookieProcessor)][0].cookiejar
        stored = [c for c in jar if c.name == "sluice_console_token"]
        assert stored and stored[0].has_nonstandard_attr("HttpOnly") and stored[0].get_nonstandard_attr("SameSite") == "Strict"
    finally:
        if web is not None:
            web.terminate()
            web.wait(timeout=20)
            web.stdout.close()
            web.stderr.close()
        server.stop()


def test_serve_web_beyond_loopback_needs_tls_or_insecure():
    web = serve_web("serve", "web", "--host", "0.0.0.0", "--web-port", "0")
    out, err = web.communicate(timeout=60)
    assert web.returncode == 2 and "tokens in clear" in err and "--tls-cert" in err
