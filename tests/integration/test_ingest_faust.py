"""The ingest bridge (`python -m sluice_services.ingest`, a Faust app) on a real Kafka broker against a
real `sluice standalone` with an authorization policy: S3 object-created events in, partition
notifications out through Notifications.Publish on a producer's token, each firing a job of a
partition-triggered schedule; a malformed event, a key no route matches, a hostile key and a
dataset the producer may not publish to land in the dead-letter topic with their reasons; a
redelivered event, and a whole second consumer group re-reading the topic, make no second job."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from sluice.bus import TopicSpec
from sluice.bus.kafka import KafkaBus
from sluice.client import SluiceClient
from sluice_services.localserver import LocalServer
from sluice.runtime.auth_policy import hash_token
from tests.support.kafka import KafkaBroker
from tests.conftest import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # ~50 s: a broker, a standalone started twice, two Faust workers

ADMIN, INGEST = "admin-token-ingest-test", "ingest-token-ingest-test"
POLICY = f"""
[[principal]]
name = "admin"
token_sha256 = "{hash_token(ADMIN)}"
grants = [{{ role = "admin", namespace = "*" }}]

[[principal]]
name = "ingest"
token_sha256 = "{hash_token(INGEST)}"
grants = [{{ role = "producer", namespace = "clickstream", datasets = ["events"] }}]
"""
MAPPING = """
[[route]]
bucket = "raw"
prefix = "clickstream/"
pattern = "marketplace={marketplace}/date={date}/hour={hour}/_SUCCESS"
namespace = "clickstream"
dataset = "events"

[[route]]   # the ingest principal is no producer of this dataset: PERMISSION_DENIED
bucket = "raw"
prefix = "secret/"
pattern = "date={date}/_SUCCESS"
namespace = "clickstream"
dataset = "secret"
"""
OBJECTS, DEAD = "objects", "objects.dead-letter"


def s3_event(key: str, sequencer: str, size: int = 100) -> bytes:
    """An AWS S3 event notification (the key URL-encoded as S3 does)."""
    return json.dumps({"Records": [{
        "eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": "us-east-1",
        "eventTime": "2024-03-01T10:00:00.000Z", "eventName": "ObjectCreated:Put",
        "s3": {"s3SchemaVersion": "1.0", "configurationId": "sluice",
               "bucket": {"name": "raw", "arn": "arn:aws:s3:::raw"},
               "object": {"key": key.replace("=", "%3D"), "size": size, "eTag": "d41d8cd98f00b204e9800998ecf8427e",
                          "sequencer": sequencer}}}]}).encode()


def marker(marketplace: str, hour: str) -> str:
    return f"clickstream/marketplace={marketplace}/date=2024-03-01/hour={hour}/_SUCCESS"


class Ingest:
    """`python -m sluice_services.ingest` as a child process, stopped by its pid."""

    def __init__(self, broker: str, server: str, mapping: Path, log: Path, app_id: str) -> None:
        self.log = log
        argv = [sys.executable, "-m", "sluice_services.ingest", "--broker", broker, "--server", server,
                "--mapping", str(mapping), "--topic", OBJECTS, "--dead-letter-topic", DEAD, "--app-id", app_id,
                "--max-backoff", "1"]
        with open(log, "ab") as stderr:
            self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                            env={**os.environ, "SLUICE_TOKEN": INGEST})
        line = self.process.stdout.readline()
        if "sluice ingest ready" not in line:
            self.stop()
            raise AssertionError(f"ingest did not start: {line!r}\n{log.read_text()[-3000:]}")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process.stdout.close()
        return self.process.returncode


async def dead_letters(bus: KafkaBus, group: str, count: int, timeout: float = 60) -> list:
    consumer = bus.consumer(group, [DEAD])
    records, deadline = [], time.monotonic() + timeout
    try:
        while len(records) < count and time.monotonic() < deadline:
            records += await consumer.poll(timeout=1)
    finally:
        await consumer.close()
    return records


def wait_for_jobs(client: SluiceClient, schedule_id: str, count: int, timeout: float = 60) -> list:
    deadline = time.monotonic() + timeout
    while True:
        jobs = client.list_jobs(schedule_id)
        if len(jobs) >= count or time.monotonic() > deadline:
            return jobs
        time.sleep(0.3)


def partitions_of(jobs) -> list[tuple]:
    return sorted((tuple((kv.name, kv.value) for kv in p.key), p.location, p.size_bytes)
                  for job in jobs for n in job.context.notifications for p in n.partition_committed.partitions)


async def test_object_events_become_partition_notifications_and_the_rest_is_dead_lettered(tmp_path):
    (tmp_path / "policy.toml").write_text(POLICY)
    (tmp_path / "mapping.toml").write_text(MAPPING)
    address = f"127.0.0.1:{free_port()}"
    args = ["--auth-policy", str(tmp_path / "policy.toml"), "--port", address.split(":")[1]]  # the last --port wins
    with KafkaBroker() as kafka, LocalServer(tmp_path / "sluice", args=args) as server:
        bus = KafkaBus(kafka.bootstrap)
        await bus.create_topics([TopicSpec(OBJECTS, 2), TopicSpec(DEAD, 1)])
        producer = bus.producer()
        client = SluiceClient(server.address, token=ADMIN)
        opens = datetime.now(timezone.utc) + timedelta(hours=2)  # the jobs wait for a window: nothing is launched
        created = subprocess.run(
            [sys.executable, "-m", "sluice_services.cli", "--server", server.address, "--json", "schedules", "create",
             "--name", "hourly", "--namespace", "clickstream", "--app", "clickstream", "--program", "hourly_metrics",
             "--dataset", "clickstream.events", "--enabled", "--waiting-job", "separate",  # a job per notification
             "--window", f"{opens:%H:%M}-{opens + timedelta(minutes=1):%H:%M}"],
            capture_output=True, text=True, timeout=60, env={**os.environ, "SLUICE_TOKEN": ADMIN})
        assert created.returncode == 0, created.stderr
        schedule_id = json.loads(created.stdout)["id"]

        events = [  # (key, value): one bucket's events land on one partition in order, as S3 keys them here
            (b"raw", s3_event(marker("US", "09"), "0001", size=1234)),
            (b"raw", s3_event(marker("US", "09").replace("_SUCCESS", "part-0.parquet"), "0002")),  # ignored
            (b"raw", b"{this is not JSON"),
            (b"raw", s3_event("unrouted/marketplace=US/_SUCCESS", "0003")),
            (b"raw", s3_event("clickstream/marketplace=../date=2024-03-01/hour=09/_SUCCESS", "0004")),
            (b"raw", s3_event("secret/date=2024-03-01/_SUCCESS", "0005")),
            (b"raw", s3_event(marker("UK", "09"), "0006", size=99)),
            (b"raw", s3_event(marker("US", "09"), "0001", size=1234)),  # the first event, delivered again
        ]
        for key, value in events:
            await producer.send(OBJECTS, value, key=key)
        started = time.monotonic()
        ingest = Ingest(f"kafka://{kafka.bootstrap}", server.address, tmp_path / "mapping.toml",
                        tmp_path / "ingest.log", "sluice-ingest-test")
        try:
            letters = await dead_letters(bus, "probe-1", 4)
            reasons = sorted(dict(r.headers)["reason"].decode() for r in letters)
            assert len(reasons) == 4, (reasons, (tmp_path / "ingest.log").read_text()[-3000:])
            assert reasons[0].startswith("malformed: not JSON")
            assert reasons[1].startswith("no route: s3://raw/unrouted/marketplace=US/_SUCCESS")
            assert reasons[2].startswith("refused: PERMISSION_DENIED: token:ingest lacks notifications.publish")
            assert reasons[3].startswith("refused: key 'clickstream/marketplace=../") and "is dots only" in reasons[3]
            assert {r.value for r in letters} == {value for _, value in events[2:6]}
            assert all(dict(r.headers)["source-topic"] == OBJECTS.encode() for r in letters)

            jobs = wait_for_jobs(client, schedule_id, 2)
            assert partitions_of(jobs) == [
                ((("marketplace", "UK"), ("date", "2024-03-01"), ("hour", "09")),
                 "s3://raw/clickstream/marketplace=UK/date=2024-03-01/hour=09", 99),
                ((("marketplace", "US"), ("date", "2024-03-01"), ("hour", "09")),
                 "s3://raw/clickstream/marketplace=US/date=2024-03-01/hour=09", 1234),
            ]
            first_pass = time.monotonic() - started
        finally:
            assert ingest.stop() == 0

        # The server goes away; a second consumer group reads the topic from the start, so every event is
        # delivered again while Publish answers UNAVAILABLE: retried with backoff, not dead-lettered.
        server.stop()
        await producer.send(OBJECTS, s3_event(marker("JP", "10"), "0007"), key=b"raw")
        again = Ingest(f"kafka://{kafka.bootstrap}", server.address, tmp_path / "mapping.toml",
                       tmp_path / "ingest-2.log", "sluice-ingest-test-2")
        try:
            # the first event waits (its partition with it: order is kept) while the server is away
            letters = await dead_letters(bus, "probe-2", 5, timeout=4)
            assert len(letters) == 4
            log = (tmp_path / "ingest-2.log").read_text()
            assert "failed with UNAVAILABLE" in log and "retry" in log, log[-3000:]
            server.start()  # the same data directory and port
            assert server.address == address
            # the JP event comes after the redelivered ones on the same bus key: once its job exists, the
            # matcher has seen the duplicates before it
            jobs = wait_for_jobs(client, schedule_id, 3)
            assert len(jobs) == 3, partitions_of(jobs)
            time.sleep(1)
            jobs = client.list_jobs(schedule_id)
            assert [p[0][0] for p in partitions_of(jobs)] == [("marketplace", "JP"), ("marketplace", "UK"),
                                                               ("marketplace", "US")]
            letters = await dead_letters(bus, "probe-3", 9, timeout=3)
            assert len(letters) == 8 and dict(letters[-1].headers)["reason"].startswith(b"refused: PERMISSION_DENIED")
        finally:
            assert again.stop() == 0
            client.close()
            await producer.close()
            await bus.close()
        print(f"first pass (ingest start to two jobs and four dead letters): {first_pass:.1f} s")
