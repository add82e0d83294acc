"""The web console in real headless Chromium (Debian's chromium + chromedriver, `make chromium`):
a real `sluice standalone --web-port 0` with an authorization policy, demo-like data (datasets,
partitions, completed runs, a pending job, a quarantined commit sequence, a dead letter, a backfill),
every page opened, every action performed through the browser (enable, disable, run now, cancel a
run, release, replay a dead letter) and its effect checked through the gRPC API; a reader-only
principal sees no enabled action, may not read the event log, and a forged POST is refused with 403
naming the permission.
Screenshots go to .artifacts/console/ (SLUICE_ARTIFACTS_DIR to change), printed at the end."""
from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Iterator

import grpc
import pytest
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.support.ui import WebDriverWait

from sluice.v1 import (
    dead_letters_pb2,
    dead_letters_pb2_grpc,
    jobs_pb2,
    jobs_pb2_grpc,
    notifications_pb2,
    runs_pb2,
    runs_pb2_grpc,
    schedules_pb2,
    schedules_pb2_grpc,
)
from sluice.v1 import datasets_pb2, datasets_pb2_grpc
from tests.support.console import (
    ADMIN_TOKEN,
    CHROMEDRIVER,
    CHROMIUM,
    READER_TOKEN,
    REPO,
    ConsoleServer,
    bearer,
    chrome,
    dead_letter_poison,
    load_demo_data,
)
from tests.support.waiting import eventually

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(240)]

ARTIFACTS = Path(os.environ.get("SLUICE_ARTIFACTS_DIR", REPO / ".artifacts")) / "console"


@pytest.fixture(scope="module")
def browser(tmp_path_factory) -> Iterator:
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.fail("no /usr/bin/chromium or /usr/bin/chromedriver: run `make chromium`", pytrace=False)
    driver = chrome(tmp_path_factory.mktemp("chromium-profile"))
    driver.set_page_load_timeout(30)
    driver.set_script_timeout(15)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        yield driver
    finally:
        driver.quit()
        print(f"\nconsole screenshots in {ARTIFACTS}")


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Iterator[dict]:
    server = ConsoleServer(tmp_path_factory.mktemp("console")).start()
    channel = grpc.insecure_channel(server.address)
    try:
        ids = load_demo_data(channel, ADMIN_TOKEN, server.data_dir)
        metadata = bearer(ADMIN_TOKEN)
        runs = runs_pb2_grpc.RunsStub(channel)
        partitions = datasets_pb2_grpc.PartitionsStub(channel)
        eventually(lambda: sum(r.status == 3 for r in runs.ListRuns(runs_pb2.ListRunsRequest(), metadata=metadata).runs)
                 >= 2, what="two completed runs")
        quarantined = eventually(lambda: [s for s in partitions.ListCommitSequences(
            datasets_pb2.ListCommitSequencesRequest(), metadata=metadata).sequences if s.status == "QUARANTINED"],
            what="a quarantined commit sequence")
        asyncio.run(dead_letter_poison(server.data_dir, 1))
        letter = eventually(lambda: dead_letters(channel), what="a dead letter")[0]
        yield {"server": server, "channel": channel, "ids": ids, "quarantined": quarantined[0].id,
               "letter": letter.id}
    finally:
        channel.close()
        server.stop()


def dead_letters(channel) -> list[dead_letters_pb2.DeadLetter]:
    return list(dead_letters_pb2_grpc.DeadLettersStub(channel).ListDeadLetters(
        dead_letters_pb2.ListDeadLettersRequest(), metadata=bearer(ADMIN_TOKEN)).dead_letters)


def runs_of(world, name: str) -> list[runs_pb2.Run]:
    return list(runs_pb2_grpc.RunsStub(world["channel"]).ListRuns(runs_pb2.ListRunsRequest(
        schedule_id=world["ids"][name]), metadata=bearer(ADMIN_TOKEN)).runs)


def shot(driver, name: str) -> None:
    driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))


def navigate(driver, element) -> None:
    """Click a link or a submit button and wait for the next page: an element found right after a
    bare click may still be the old page's, gone stale by the time it is read."""
    old = driver.find_element("tag name", "html")
    element.click()
    WebDriverWait(driver, 30).until(lambda _: stale(old))


def stale(element) -> bool:
    """Whether the element left the page: selenium's staleness_of, plus the other error chromium
    raises for a node of a page just replaced (it failed a CI run as "unhandled inspector error")."""
    try:
        element.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as error:
        if "does not belong to the document" in str(error):
            return True
        raise
    return False


def sign_in(driver, web: str, token: str) -> None:
    driver.get(f"{web}/schedules")
    assert driver.current_url.startswith(f"{web}/login")
    driver.find_element("id", "token").send_keys(token)
    navigate(driver, driver.find_element("css selector", "#login button[type=submit]"))
    eventually(lambda: driver.current_url.startswith(f"{web}/schedules"), 15, "the schedules page after signing in")


def sign_out(driver) -> None:
    navigate(driver, driver.find_element("css selector", "form[action='/logout'] button"))


def schedule_row(driver, schedule_id: str):
    return driver.find_element("css selector", f"tr[data-schedule-id='{schedule_id}']")


def confirm(driver, action_link) -> None:
    """Follow an action's link to its confirm page and confirm."""
    navigate(driver, action_link)
    eventually(lambda: driver.find_elements("id", "confirm"), 15, "the confirm page")
    shot(driver, f"confirm-{action_link_name(driver)}")
    navigate(driver, driver.find_element("id", "confirm"))


def action_link_name(driver) -> str:
    return driver.current_url.split("/confirm/")[1].split("/")[0]


def registry(world) -> schedules_pb2_grpc.ScheduleRegistryStub:
    return schedules_pb2_grpc.ScheduleRegistryStub(world["channel"])


def get_schedule(world, name: str) -> schedules_pb2.Schedule:
    return registry(world).GetSchedule(schedules_pb2.GetScheduleRequest(id=world["ids"][name]),
                                       metadata=bearer(ADMIN_TOKEN))


def sequence_status(world, sequence_id: str) -> str:
    answer = datasets_pb2_grpc.PartitionsStub(world["channel"]).ListCommitSequences(
        datasets_pb2.ListCommitSequencesRequest(), metadata=bearer(ADMIN_TOKEN))
    return next(s.status for s in answer.sequences if s.id == sequence_id)


def test_an_admin_opens_every_page_and_performs_every_action(browser, world):
    driver, web, ids = browser, world["server"].web, world["ids"]
    driver.get(f"{web}/login")
    shot(driver, "login")
    sign_in(driver, web, ADMIN_TOKEN)
    assert driver.find_element("id", "principal").text == "token:ada"

    # schedules: trigger in words, next fire, enabled, last runs (loaded by htmx)
    eventually(lambda: "COMPLETED" in schedule_row(driver, ids["hourly_counts"]).text, 15, "last runs of hourly_counts")
    nightly = schedule_row(driver, ids["nightly_report"]).text
    assert "every day at 02:00 Asia/Tokyo (cron 0 2 * * *)" in nightly and "(when enabled)" in nightly and "disabled" in nightly
    assert "1 new partition of web.clicks" in schedule_row(driver, ids["hourly_counts"]).text
    shot(driver, "schedules")

    # enable, then disable, each confirmed; the effect read back through the registry's API
    confirm(driver, schedule_row(driver, ids["nightly_report"]).find_element("css selector", "a[data-action=enable]"))
    eventually(lambda: "enabled" in schedule_row(driver, ids["nightly_report"]).find_element("class name", "enabled").text,
             15, "nightly_report shown enabled")
    assert get_schedule(world, "nightly_report").enabled
    confirm(driver, schedule_row(driver, ids["hourly_counts"]).find_element("css selector", "a[data-action=disable]"))
    eventually(lambda: "disabled" in schedule_row(driver, ids["hourly_counts"]).text, 15, "hourly_counts shown disabled")
    assert not get_schedule(world, "hourly_counts").enabled

    # cancelling a confirm step does nothing
    navigate(driver, schedule_row(driver, ids["nightly_report"]).find_element("css selector", "a[data-action=disable]"))
    navigate(driver, driver.find_element("id", "cancel"))
    assert get_schedule(world, "nightly_report").enabled

    # searchable (htmx as you type) and paged
    search = driver.find_element("css selector", "form.search input[name=q]")
    search.send_keys("night")
    eventually(lambda: len(driver.find_elements("css selector", "#schedules tbody tr[data-schedule-id]")) == 1, 15,
             "the filtered table")
    assert driver.find_elements("css selector", f"tr[data-schedule-id='{ids['nightly_report']}']")
    driver.get(f"{web}/schedules?page_size=3")
    first = {e.get_attribute("data-schedule-id") for e in driver.find_elements("css selector", "tr[data-schedule-id]")}
    navigate(driver, driver.find_element("css selector", "nav.pager a.next"))
    second = {e.get_attribute("data-schedule-id") for e in driver.find_elements("css selector", "tr[data-schedule-id]")}
    assert len(first) == 3 and len(second) == 2 and first | second == set(ids.values())

    # run now: a job of the yearly schedule exists at once; its program sleeps, so its run goes on
    driver.get(f"{web}/schedules")
    confirm(driver, schedule_row(driver, ids["long_report"]).find_element("css selector", "a[data-action=run-now]"))
    assert jobs_pb2_grpc.JobsStub(world["channel"]).ListJobs(jobs_pb2.ListJobsRequest(
        schedule_id=ids["long_report"]), metadata=bearer(ADMIN_TOKEN)).jobs
    running = eventually(lambda: [r for r in runs_of(world, "long_report") if r.status == notifications_pb2.RUNNING],
                       what="the run-now run going")[0]

    # a run's page: its log tail, followed while it goes (htmx polls), and cancel
    driver.get(f"{web}/runs/{running.id}")
    eventually(lambda: "counting 0 notifications into web.counts" in driver.find_element("id", "run-log").text, 30,
             "the run's log line")
    shot(driver, "run-log")
    confirm(driver, driver.find_element("css selector", "a[data-action=cancel]"))
    eventually(lambda: runs_pb2_grpc.RunsStub(world["channel"]).GetRun(runs_pb2.GetRunRequest(id=running.id),
             metadata=bearer(ADMIN_TOKEN)).status == notifications_pb2.KILLED, 30, "the run KILLED")
    driver.get(f"{web}/runs/{running.id}")
    assert driver.find_element("id", "run-status").text == "KILLED" and not driver.find_elements(
        "css selector", "[data-action=cancel]")

    # pending jobs: what each waits on and its next check
    driver.get(f"{web}/jobs")
    jobs = driver.find_element("id", "jobs").text
    assert "delayed_counts" in jobs and "delayed 86400 s after the trigger" in jobs and "PENDING_CONSTRAINT" in jobs
    delayed = next(row for row in driver.find_elements("css selector", "#jobs tbody tr") if "delayed_counts" in row.text)
    assert "UTC" in delayed.find_element("css selector", "td:nth-child(6)").text
    shot(driver, "jobs")

    # runs: status, duration, rows, input partitions; a run's page
    driver.get(f"{web}/runs")
    table = driver.find_element("id", "runs").text
    assert "COMPLETED" in table and "FAILED" in table
    shot(driver, "runs")
    # blocked_writer's first run completes too (its commit fails afterwards), and may come first
    counted = next(r.id for r in runs_of(world, "hourly_counts") if r.status == notifications_pb2.COMPLETED)
    navigate(driver, driver.find_element("css selector", f"tr[data-run-id='{counted}'] td.id a"))
    assert driver.find_element("id", "run-status").text == "COMPLETED"
    assert "hour=" in driver.find_element("id", "inputs").text and "web.counts" in driver.find_element("id", "outputs").text
    shot(driver, "run")

    # datasets with partitions, consumers and the quarantine; release it (its cause fixed first)
    driver.get(f"{web}/datasets")
    assert {"web.clicks", "web.counts", "web.blocked"} <= {
        e.get_attribute("data-dataset") for e in driver.find_elements("css selector", "tr[data-dataset]")}
    shot(driver, "datasets")
    navigate(driver, driver.find_element("link text", "web.clicks"))
    assert "hour=1" in driver.find_element("id", "partitions").text and "hour=2" in driver.find_element("id", "partitions").text
    assert "web:analytics.hourly_counts.count" in driver.find_element("id", "consumers").text
    shot(driver, "dataset")
    (world["server"].data_dir / "data" / "web" / "blocked").unlink()
    driver.get(f"{web}/datasets")
    row = driver.find_element("css selector", f"tr[data-sequence-id='{world['quarantined']}']")
    confirm(driver, row.find_element("css selector", "a[data-action=release]"))
    eventually(lambda: driver.current_url.startswith(f"{web}/datasets"), 15, "back on the datasets page")
    assert sequence_status(world, world["quarantined"]) == "FINISHED"
    assert not driver.find_elements("css selector", f"tr[data-sequence-id='{world['quarantined']}']")

    # the lineage graph, drawn
    driver.get(f"{web}/lineage")
    navigate(driver, driver.find_element("link text", "web:analytics.hourly_counts.count"))
    nodes = {e.get_attribute("data-node") for e in driver.find_elements("css selector", "svg#lineage-graph g.node")}
    assert {"dataset:web:clicks", "job:web:analytics.hourly_counts.count", "dataset:web:counts"} <= nodes
    assert len(driver.find_elements("css selector", "svg#lineage-graph line.edge")) >= 2
    shot(driver, "lineage")

    # dead letters: listed, filtered by reason, replayed once (recorded: the API says replayed)
    driver.get(f"{web}/dead-letters?q=malformed")
    row = driver.find_element("css selector", f"tr[data-letter-id='{world['letter']}']")
    assert "sluice.notifications.partition" in row.text and "trigger-matcher-lookup" in row.text
    shot(driver, "dead-letters")
    confirm(driver, row.find_element("css selector", "a[data-action=replay]"))
    assert next(d for d in dead_letters(world["channel"]) if d.id == world["letter"]).replayed
    assert "replayed" in driver.find_element("css selector", f"tr[data-letter-id='{world['letter']}'] td.replayed").text

    # the event log by stream: streams with their counts, one stream's events
    driver.get(f"{web}/events?q=schedule-")
    stream = f"schedule-{ids['nightly_report']}"
    assert driver.find_element("css selector", f"tr[data-stream='{stream}']")
    shot(driver, "event-log")
    navigate(driver, driver.find_element("link text", stream))
    events = driver.find_element("id", "events").text
    assert "ScheduleCreated" in events and "ScheduleEnabled" in events and "nightly_report" in events
    shot(driver, "event-log-stream")

    # backfills with their progress (one of nightly_report, enabled above); SLA misses (none on this data)
    backfill = jobs_pb2_grpc.JobsStub(world["channel"]).StartBackfill(jobs_pb2.StartBackfillRequest(
        schedule_id=ids["nightly_report"], start={"seconds": 1_767_225_600}, end={"seconds": 1_767_398_400}),
        metadata=bearer(ADMIN_TOKEN))  # 2026-01-01 to 2026-01-03 UTC: two nights at 02:00 Tokyo
    driver.get(f"{web}/backfills")
    assert driver.find_element("css selector", f"tr[data-backfill-id='{backfill.id}'] td:nth-child(5)").text == "2"
    shot(driver, "backfills")
    driver.get(f"{web}/sla-misses")
    assert "No SLA misses" in driver.find_element("id", "sla-misses").text
    shot(driver, "sla-misses")
    # assets are the console's own: no request leaves for a CDN
    sources = driver.execute_script("return [...document.scripts].map(s => s.src)")
    assert sources == [f"{web}/static/htmx.min.js"]
    sign_out(driver)
    assert driver.current_url.startswith(f"{web}/login")


def test_a_reader_sees_no_enabled_action_and_a_forged_post_is_refused(browser, world):
    driver, web, ids = browser, world["server"].web, world["ids"]
    driver.delete_all_cookies()
    sign_in(driver, web, READER_TOKEN)
    assert driver.find_element("id", "principal").text == "token:rita"
    actions = driver.find_elements("css selector", ".action")
    assert actions and all(a.tag_name == "button" and not a.is_enabled() for a in actions)
    assert "schedules.write" in actions[0].get_attribute("title")
    assert {a.get_attribute("data-action") for a in actions} >= {"enable", "disable", "run-now"}
    shot(driver, "reader-schedules")
    driver.get(f"{web}/dead-letters")
    replays = driver.find_elements("css selector", "[data-action=replay]")
    assert replays and all(a.tag_name == "button" and not a.is_enabled() for a in replays)
    assert "deadletters.replay" in replays[0].get_attribute("title")
    unreplayed = replays[0].find_element("xpath", "./ancestor::tr").get_attribute("data-letter-id")
    refused = driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        const csrf = document.querySelector('meta[name=csrf-token]').content;
        fetch('/actions/replay/' + arguments[0], {method: 'POST',
              headers: {'Content-Type': 'application/x-www-form-urlencoded'}, body: 'csrf=' + csrf})
            .then(response => response.text().then(text => done([response.status, text])));""", unreplayed)
    assert refused[0] == 403 and "lacks deadletters.replay" in refused[1]
    assert not next(d for d in dead_letters(world["channel"]) if d.id == unreplayed).replayed
    driver.get(f"{web}/events")
    assert "403" in driver.find_element("tag name", "h1").text
    assert "lacks log.read" in driver.find_element("id", "details").text
    driver.get(f"{web}/schedules")
    before = get_schedule(world, "nightly_report").enabled
    answer = driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        const csrf = document.querySelector('meta[name=csrf-token]').content;
        fetch('/actions/disable/' + arguments[0], {method: 'POST',
              headers: {'Content-Type': 'application/x-www-form-urlencoded'}, body: 'csrf=' + csrf + '&back=/schedules'})
            .then(response => response.text().then(text => done([response.status, text])));""", ids["nightly_report"])
    assert answer[0] == 403 and "PERMISSION_DENIED" in answer[1] and "lacks schedules.write" in answer[1]
    assert get_schedule(world, "nightly_report").enabled == before
    refused = driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        fetch('/actions/enable/' + arguments[0], {method: 'POST',
              headers: {'Content-Type': 'application/x-www-form-urlencoded'}, body: 'csrf=forged'})
            .then(response => done(response.status));""", ids["hourly_counts"])
    assert refused == 403 and not get_schedule(world, "hourly_counts").enabled
    driver.get(f"{web}/confirm/disable/{ids['nightly_report']}")
    navigate(driver, driver.find_element("id", "confirm"))
    assert "403 Forbidden" in driver.find_element("tag name", "h1").text
    assert "lacks schedules.write on namespace web" in driver.find_element("id", "details").text
    shot(driver, "reader-refused")
    sign_out(driver)
    driver.find_element("id", "token").send_keys("not-a-token")
    navigate(driver, driver.find_element("css selector", "#login button[type=submit]"))
    assert "do not know this token" in driver.find_element("id", "login-error").text


def test_with_authorization_off_nobody_signs_in_and_every_action_is_offered(browser, tmp_path):
    server = ConsoleServer(tmp_path, policy=False).start()
    channel = grpc.insecure_channel(server.address)
    try:
        registry_ = schedules_pb2_grpc.ScheduleRegistryStub(channel)
        created = registry_.CreateSchedule(schedules_pb2.CreateScheduleRequest(schedule=schedules_pb2.Schedule(
            name="open", program={"namespace": "web", "app": "analytics", "program": "count"},
            trigger={"time": {"cron": "*/5 * * * *", "zone": "UTC"}}, enabled=True)))
        browser.delete_all_cookies()
        browser.get(f"{server.web}/schedules")
        assert browser.find_element("id", "principal").text == "authorization off"
        row = schedule_row(browser, created.id)
        confirm(browser, row.find_element("css selector", "a[data-action=disable]"))
        eventually(lambda: not registry_.GetSchedule(schedules_pb2.GetScheduleRequest(id=created.id)).enabled, 15,
                 "the schedule disabled")
        shot(browser, "authorization-off")
    finally:
        channel.close()
        server.stop()
