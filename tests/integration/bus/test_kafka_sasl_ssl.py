"""The Kafka bus over TLS with SCRAM-SHA-512 logins, against a real broker's SASL_SSL listener
(tests.support.kafka.KafkaBroker(sasl_ssl=True): an openssl CA, a PEM keystore, SCRAM users made
when the storage is formatted). The durable bus contract (produce, consume, groups, commits, reopen),
the dead-letter path of the services, PLAIN logins, and the refusals: a wrong password, a plaintext
client at the SASL_SSL port and a server given a bad URL each fail at once with a clear message."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from sluice.bus import TopicSpec
from sluice.bus.kafka import KafkaBus, KafkaUnreachable
from tests.support.kafka import KafkaBroker
from tests.integration.bus.contract import DurableBusContract
from tests.integration.test_dead_letter import poison_messages_are_dead_lettered

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def kafka_broker():
    with KafkaBroker(sasl_ssl=True) as broker:
        yield broker


def sasl_bus(broker: KafkaBroker, *, mechanism: str = "SCRAM-SHA-512", password: str | None = None) -> KafkaBus:
    env = broker.client_env()
    if password is not None:
        env["SLUICE_KAFKA_PASSWORD"] = password
    return KafkaBus.from_url(broker.sasl_ssl_url(mechanism), env=env)


class TestKafkaBusOverSaslSsl(DurableBusContract):
    settle_timeout = 30.0

    @pytest.fixture(autouse=True)
    def _broker(self, kafka_broker: KafkaBroker) -> None:
        self.broker = kafka_broker

    async def make_bus(self, tmp_path) -> KafkaBus:
        bus = sasl_bus(self.broker)
        assert bus.security.protocol == "SASL_SSL" and bus.security.mechanism == "SCRAM-SHA-512"
        return bus

    async def reopen(self, bus, tmp_path) -> KafkaBus:
        return sasl_bus(self.broker)


async def test_poison_messages_are_dead_lettered_over_sasl_ssl(kafka_broker: KafkaBroker, tmp_path) -> None:
    """The registry and matcher on the SASL_SSL bus: dead letters with reasons, then a valid notification triggers."""
    await poison_messages_are_dead_lettered(tmp_path, sasl_bus(kafka_broker), settle=60)


async def test_plain_logins_work_too(kafka_broker: KafkaBroker) -> None:
    bus = sasl_bus(kafka_broker, mechanism="PLAIN")
    try:
        topic = f"plain-{time.time_ns()}"
        await bus.create_topics([TopicSpec(topic)])
        assert await bus.producer().send(topic, b"v") == (0, 0)
    finally:
        await bus.close()


async def test_a_wrong_password_is_refused_at_once_by_name(kafka_broker: KafkaBroker) -> None:
    bus = sasl_bus(kafka_broker, password="not-the-password")
    try:
        for attempt in (lambda: bus.create_topics([TopicSpec("never")]), lambda: bus.producer().send("never", b"v")):
            started = time.monotonic()
            with pytest.raises(KafkaUnreachable) as refused:
                await attempt()
            assert time.monotonic() - started < 15  # not a hang, nor aiokafka's 40 s request timeout
            message = str(refused.value)
            assert "SaslAuthenticationFailed" in message and "invalid credentials" in message
            assert "SCRAM-SHA-512 as user 'sluice'" in message and "not-the-password" not in message
        consumer = bus.consumer("never", ["never"])
        with pytest.raises(KafkaUnreachable, match="SaslAuthenticationFailed"):
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                await consumer.poll(timeout=1)
    finally:
        await bus.close()


async def test_a_plaintext_client_at_the_sasl_ssl_port_fails_clearly(kafka_broker: KafkaBroker) -> None:
    for url in (f"kafka://{kafka_broker.sasl_ssl_bootstrap}",  # no TLS, no login
                f"kafka://{kafka_broker.sasl_ssl_bootstrap}?security_protocol=SSL&ssl_cafile={kafka_broker.ca_file}"):
        bus = KafkaBus.from_url(url, env={})
        try:
            started = time.monotonic()
            with pytest.raises(KafkaUnreachable) as refused:
                await bus.create_topics([TopicSpec("never")])
            assert time.monotonic() - started < 15
            assert kafka_broker.sasl_ssl_bootstrap in str(refused.value)
            assert "closed" in str(refused.value)
        finally:
            await bus.close()


def serve(bus_url: str, env: dict[str, str], tmp_path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sluice_services.cli", "serve", "registry", "--port", "0", "--data-dir", str(tmp_path),
         "--bus", bus_url], env={**os.environ, **env}, capture_output=True, text=True, timeout=120)


def test_a_server_with_a_wrong_password_or_option_exits_with_one_line(kafka_broker: KafkaBroker, tmp_path) -> None:
    env = {**kafka_broker.client_env(), "SLUICE_KAFKA_PASSWORD": "hunter2-wrong"}
    wrong = serve(kafka_broker.sasl_ssl_url(), env, tmp_path / "wrong")
    assert wrong.returncode == 1, wrong.stderr
    last = wrong.stderr.splitlines()[-1]  # after aiokafka's own log lines
    assert last.startswith("sluice: error: cannot use the Kafka cluster at ") and "SaslAuthenticationFailed" in last
    assert "hunter2" not in wrong.stderr and "Traceback" not in wrong.stderr

    bad = serve(f"kafka://ops:hunter2@{kafka_broker.sasl_ssl_bootstrap}?security_protocol=SASL_SSL&ssl_ca=x",
                {}, tmp_path / "bad")
    assert bad.returncode == 2
    assert bad.stderr.splitlines() == [
        f"sluice: error: --bus: 'kafka://ops:***@{kafka_broker.sasl_ssl_bootstrap}"
        "?security_protocol=SASL_SSL&ssl_ca=x':"
        " ssl_ca: unknown option (known: security_protocol, sasl_mechanism, ssl_cafile, ssl_certfile, ssl_keyfile,"
        " replication_factor, min_insync_replicas, dead_letter_retention_ms)"]
