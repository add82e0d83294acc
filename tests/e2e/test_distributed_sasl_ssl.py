"""The clickstream example in distributed mode over Kafka's SASL_SSL listener: the five services as
separate OS processes, every one on `kafka://...?security_protocol=SASL_SSL&sasl_mechanism=SCRAM-SHA-512
&ssl_cafile=...` with its login from SLUICE_KAFKA_USERNAME / SLUICE_KAFKA_PASSWORD (not on the command
line), PostgreSQL as the event log and real Spark. A partition notification becomes a completed run
of the hourly program, with its lineage."""
from __future__ import annotations

import contextlib
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from sluice.client import SluiceClient
from sluice.domain.common import PartitionRef
from sluice_services.localserver import LocalServer
from tests.support.kafka import KafkaBroker
from tests.support.service_processes import start_registry_first
from tests.support.postgres import PostgresServer
from sluice.v1 import jobs_pb2, notifications_pb2 as npb
from sluice_examples.clickstream.generate import MARKETPLACES, generate_hour
from sluice_services.composition import SERVICES
from tests.conftest import free_port
from tests.e2e.conftest import eventually
from tests.e2e.test_distributed import FINISHED, NAMESPACE, postgres_url, schedule, wait_until_matcher_observed

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(900)]


def test_clickstream_over_sasl_ssl_kafka(tmp_path):
    started = time.monotonic()
    phases = {}
    with contextlib.ExitStack() as stack:
        # The broker and PostgreSQL start side by side. The broker's thread lives until the broker is
        # stopped (the pool is shut down last): it dies with the thread that started it (PR_SET_PDEATHSIG).
        pool = stack.enter_context(ThreadPoolExecutor(1))
        kafka = KafkaBroker(sasl_ssl=True)
        stack.callback(kafka.stop)
        kafka_started = pool.submit(kafka.start)
        postgres = stack.enter_context(PostgresServer())
        kafka_started.result()
        phases["broker and postgres"] = time.monotonic() - started
        dsn = postgres_url(postgres.create_database())
        data_dir = tmp_path / "distributed"
        password = kafka.client_env()["SLUICE_KAFKA_PASSWORD"]
        common = ["--event-log", dsn, "--bus", kafka.sasl_ssl_url()]
        datasets_port = free_port()
        told = {"datasets": ["--port", str(datasets_port)],
                "launcher": ["--datasets-address", f"127.0.0.1:{datasets_port}"]}
        servers = {name: LocalServer(data_dir, command=("serve", name), args=[*common, *told.get(name, [])],
                                     env=kafka.client_env())
                   for name in SERVICES}
        for server in servers.values():
            stack.callback(server.stop)
        start_registry_first(servers)
        phases["services"] = time.monotonic() - started
        for server in servers.values():  # the secret is in the environment, not on the command line
            with open(f"/proc/{server.pid}/cmdline", "rb") as cmdline:
                assert password.encode() not in cmdline.read()
        clients = {name: stack.enter_context(SluiceClient(server.address)) for name, server in servers.items()}

        created = clients["registry"].create_schedule(schedule())
        wait_until_matcher_observed(dsn, created.id)
        local_hour = datetime(2026, 11, 22, 9, tzinfo=ZoneInfo(MARKETPLACES["US"]))
        p = generate_hour(data_dir / "data", NAMESPACE, "US", local_hour, rows=300, seed=9)
        clients["registry"].publish_partitions(
            NAMESPACE, "clickstream", [PartitionRef(p["key"], p["location"], p["size_bytes"], p["record_count"])])

        phases["schedule observed"] = time.monotonic() - started
        runs = eventually(lambda: (r := clients["launcher"].list_runs()) and all(x.status in FINISHED for x in r) and r,
                          timeout=240, what="a finished run")
        assert [npb.RunStatus.Name(r.status) for r in runs] == ["COMPLETED"], [r.error for r in runs]
        assert runs[0].outputs and all(o.partition.location for o in runs[0].outputs)
        jobs = clients["checker"].list_jobs(created.id)
        assert [jobs_pb2.JobState.Name(j.state) for j in jobs] == ["LAUNCHED"]
        eventually(lambda: [r for r in clients["lineage"].lineage_runs(job_namespace=NAMESPACE)
                            if r.state == "COMPLETE" and r.parent_run_id],
                   timeout=60, what="lineage of the run over the SASL_SSL bus")
        phases["run and lineage"] = time.monotonic() - started
        print("phases (s since start):", {name: round(t, 1) for name, t in phases.items()})
