"""The ACL table of deploy/README.md ("ACLs") against a real broker with Kafka's StandardAuthorizer:
each service logs in over SASL_SSL as its own SCRAM user holding exactly the ACLs the table (and the
rules under it) grant. The registry, matcher and checker run as services, each on its own bus, and a
published notification ends in a launch request, read by the launcher's user in its group; a poison
notification is dead-lettered by the matcher's user; the launcher's and lineage's rows are exercised
on their topics and groups; and a topic outside a user's row is refused."""
from __future__ import annotations

import asyncio
import re
import subprocess
import time
from pathlib import Path

import grpc
import pytest
from aiokafka.errors import TopicAuthorizationFailedError

from sluice.bus.kafka import KafkaBus
from sluice.bus.topics import (
    ALL_TOPICS,
    DEAD_LETTER,
    LAUNCH_REQUESTS,
    LINEAGE,
    PARTITION_NOTIFICATIONS,
    PROGRAM_NOTIFICATIONS,
)
from sluice.clock import SystemClock
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.runtime.service import run_services
from tests.support.kafka import KafkaBroker
from sluice.v1 import (
    jobs_pb2,
    notifications_pb2 as npb,
    notifications_pb2_grpc,
    schedules_pb2 as spb,
    schedules_pb2_grpc,
)
from sluice_services.composition import checker_spec, matcher_spec, registry_spec

pytestmark = [pytest.mark.integration, pytest.mark.slow]

README = Path(__file__).resolve().parents[2] / "deploy" / "README.md"
SERVICES = ("registry", "matcher", "checker", "launcher", "lineage")
CONSUMERS = ("matcher", "checker", "launcher", "lineage")

JAVA_ACLS = """
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.common.acl.*;
import org.apache.kafka.common.resource.*;
public class Acls {
    // args: the bootstrap address, then principal|resource type|pattern type|name|operation per ACL
    public static void main(String[] args) throws Exception {
        List<AclBinding> bindings = new ArrayList<>();
        for (int i = 1; i < args.length; i++) {
            String[] f = args[i].split("\\\\|");
            bindings.add(new AclBinding(
                new ResourcePattern(ResourceType.valueOf(f[1]), f[3], PatternType.valueOf(f[2])),
                new AccessControlEntry(f[0], "*", AclOperation.valueOf(f[4]), AclPermissionType.ALLOW)));
        }
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", args[0]))) {
            admin.createAcls(bindings).all().get();
        }
        System.out.println(bindings.size());
    }
}
"""


def table() -> dict[str, dict[str, list[str]]]:
    """deploy/README.md's ACL table: per service, the backquoted topics and groups of each column."""
    rows = {}
    for line in README.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0] in SERVICES:
            reads, groups, writes = (re.findall(r"`([^`]+)`", cell) for cell in cells[1:])
            rows[cells[0]] = {"reads": reads, "groups": groups, "writes": writes}
    assert set(rows) == set(SERVICES), f"the ACL table of {README} lists {sorted(rows)}"
    return rows


def acls(rows: dict[str, dict[str, list[str]]]) -> list[str]:
    """The table and the rules under it, as principal|resource type|pattern|name|operation."""
    specs = []
    for service, row in rows.items():
        user = f"User:sluice-{service}"
        specs += [f"{user}|TOPIC|PREFIXED|sluice.|{op}" for op in ("CREATE", "DESCRIBE")]
        specs += [f"{user}|TOPIC|LITERAL|{topic}|READ" for topic in row["reads"]]
        specs += [f"{user}|GROUP|LITERAL|{group}|READ" for group in row["groups"]]
        specs += [f"{user}|TOPIC|LITERAL|{topic}|WRITE" for topic in row["writes"]]
        if service in CONSUMERS:
            assert DEAD_LETTER in row["writes"], f"{service} consumes, so it dead-letters"
    return specs


@pytest.fixture(scope="module")
def kafka():
    users = {f"sluice-{service}": f"pw-{service}-{time.time_ns()}" for service in SERVICES}
    with KafkaBroker(sasl_ssl=True, scram_users=users, overrides={
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS",  # the PLAINTEXT listener: the broker itself, and this test's setup
    }) as broker:
        source = Path(broker.dir) / "Acls.java"
        source.write_text(JAVA_ACLS)
        subprocess.run(["java", "-cp", f"{broker.libs}/*", str(source), broker.bootstrap, *acls(table())],
                       check=True, capture_output=True, timeout=120)
        yield broker


def bus_of(kafka: KafkaBroker, service: str) -> KafkaBus:
    return KafkaBus.from_url(kafka.sasl_ssl_url(), env=kafka.client_env(f"sluice-{service}"))


async def test_every_service_does_its_work_with_only_the_acls_of_the_table(kafka, tmp_path):
    clock = SystemClock()
    log = SqliteEventLog(tmp_path / "events.db", clock=clock)
    buses = {service: bus_of(kafka, service) for service in SERVICES}
    producers = {service: buses[service].producer() for service in ("registry", "matcher")}
    stop = asyncio.Event()
    ready = {service: asyncio.get_running_loop().create_future() for service in ("registry", "matcher", "checker")}
    specs = {"registry": registry_spec(log, clock, producers["registry"]),
             "matcher": matcher_spec(log, clock, producers["matcher"]), "checker": checker_spec(log, clock)}
    tasks = [asyncio.create_task(run_services([spec], buses[name], log, on_ready=ready[name].set_result, stop=stop))
             for name, spec in specs.items()]
    admin = KafkaBus(kafka.bootstrap)  # the plaintext listener: a super user, to look at what was written
    try:
        port = await asyncio.wait_for(ready["registry"], 90)
        await asyncio.wait_for(asyncio.gather(ready["matcher"], ready["checker"]), 90)
        launches = buses["launcher"].consumer("launcher", [LAUNCH_REQUESTS])
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            schedule = spb.Schedule(
                name="hourly", enabled=True,
                program=npb.ProgramRef(namespace="experiments", app="clickstream", program="hourly_metrics"),
                trigger=spb.Trigger(partition=spb.PartitionTrigger(namespace="experiments", dataset="clickstream",
                                                                   count=1)))
            created = await schedules_pb2_grpc.ScheduleRegistryStub(channel).CreateSchedule(
                spb.CreateScheduleRequest(schedule=schedule))
            notification = npb.Notification(id="acl-n-1")
            notification.time.GetCurrentTime()
            notification.partition_committed.namespace = "experiments"
            notification.partition_committed.dataset = "clickstream"
            notification.partition_committed.partitions.add(key=[npb.KeyValue(name="hour", value="09")],
                                                             location="/d/09")
            received = []
            for _ in range(60):  # resent (deduplicated by id) until the matcher has the schedule
                await notifications_pb2_grpc.NotificationsStub(channel).Publish(
                    npb.PublishNotificationRequest(notification=notification))
                received += await launches.poll(timeout=1)
                if received:
                    break
        assert [jobs_pb2.LaunchRequested.FromString(r.value).job.schedule_id for r in received] == [created.id]
        await launches.commit()  # READ on the group `launcher`

        # the matcher dead-letters a poison notification the registry's user may write
        await producers["registry"].send(PARTITION_NOTIFICATIONS, b"\xff not protobuf", key=b"partition:x.y")
        letters = admin.consumer("acl-test-dead-letters", [DEAD_LETTER])
        dead = []
        deadline = time.monotonic() + 60
        while not dead and time.monotonic() < deadline:
            dead += await letters.poll(timeout=1)
        assert [dict(r.headers)["consumer-group"] for r in dead] == [b"trigger-matcher-lookup"]

        # the launcher's and lineage's rows: what they write, and lineage's read in its groups
        launcher = buses["launcher"].producer()
        for topic in (PROGRAM_NOTIFICATIONS, PARTITION_NOTIFICATIONS, LINEAGE, DEAD_LETTER):
            await launcher.send(topic, b"{}", key=b"acl")
        for group in ("lineage", "lineage-export"):
            consumer = buses["lineage"].consumer(group, [LINEAGE])
            records = []
            deadline = time.monotonic() + 60
            while not records and time.monotonic() < deadline:
                records += await consumer.poll(timeout=1)
            assert [r.value for r in records] == [b"{}"]
            await consumer.commit()
        await buses["lineage"].producer().send(DEAD_LETTER, b"x")

        # and nothing outside a row: the checker may not write the matcher's topic
        with pytest.raises(TopicAuthorizationFailedError):
            await asyncio.wait_for(buses["checker"].producer().send("sluice.jobs", b"forged"), 30)
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        for bus in (*buses.values(), admin):
            await bus.close()
        log.close()
    named = {t for row in table().values() for t in row["reads"] + row["writes"]}
    assert named <= {spec.name for spec in ALL_TOPICS}  # no misspelt topic in the table
    assert {spec.name for spec in ALL_TOPICS} - named == {"sluice.notifications.time"}  # created, used by none yet
