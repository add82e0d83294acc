"""The Kafka bus URL's security options (sluice.bus.kafka_security): parsing, refusals naming the
option, and passwords that never show (repr, error messages, redacted URLs)."""
from __future__ import annotations

import pytest

from sluice.bus.kafka import KafkaBus
from sluice.bus.kafka_security import KafkaSecurity, KafkaTopicOptions, parse_kafka_url
from sluice.clock import SimulatedClock
from sluice.domain.errors import InvalidArgument
from sluice.runtime.secrets import mask_url
from sluice_services.adapters import open_bus

ENV = {"SLUICE_KAFKA_USERNAME": "sluice", "SLUICE_KAFKA_PASSWORD": "s3cret-env"}


@pytest.fixture
def cafile(tmp_path):
    from tests.support.kafka import make_certificates

    return make_certificates(tmp_path / "tls") / "ca.pem"


def test_a_plain_url_is_plaintext_as_before():
    parsed = parse_kafka_url("kafka://127.0.0.1:9092,10.0.0.2:9092", env=ENV)
    assert parsed.bootstrap == "127.0.0.1:9092,10.0.0.2:9092"
    assert parsed.security == KafkaSecurity()
    assert parsed.security.client_options() == {"security_protocol": "PLAINTEXT"}


def test_sasl_ssl_takes_credentials_from_the_environment(cafile):
    parsed = parse_kafka_url(f"kafka://k1:9093/?security_protocol=SASL_SSL&ssl_cafile={cafile}", env=ENV)
    options = parsed.security.client_options()
    assert options["security_protocol"] == "SASL_SSL" and options["sasl_mechanism"] == "SCRAM-SHA-512"
    assert (options["sasl_plain_username"], options["sasl_plain_password"]) == ("sluice", "s3cret-env")
    assert options["ssl_context"].check_hostname
    assert "s3cret" not in repr(parsed) and "s3cret" not in parsed.security.describe()


def test_userinfo_is_percent_decoded_and_wins_over_the_environment():
    parsed = parse_kafka_url("kafka://ops:p%40ss%3Aword@k1:9093?security_protocol=sasl_plaintext&sasl_mechanism=PLAIN",
                             env=ENV)
    security = parsed.security
    assert (security.mechanism, security.username, security.password) == ("PLAIN", "ops", "p@ss:word")
    user_only = parse_kafka_url("kafka://ops@k1:9093?security_protocol=SASL_PLAINTEXT", env=ENV)
    assert (user_only.security.username, user_only.security.password) == ("ops", "s3cret-env")


@pytest.mark.parametrize("url, named", [
    ("kafka://k:9093?security_protocl=SASL_SSL", "security_protocl: unknown option"),
    ("kafka://k:9093?security_protocol=TLS", "security_protocol: 'TLS' is not one of"),
    ("kafka://k:9093?security_protocol=SASL_SSL&sasl_mechanism=GSSAPI", "sasl_mechanism: 'GSSAPI'"),
    ("kafka://k:9093?security_protocol=SSL&security_protocol=SSL", "security_protocol: given twice"),
    ("kafka://k:9093?ssl_cafile=", "ssl_cafile: empty value"),
    ("kafka://k:9093?sasl_mechanism=PLAIN", "sasl_mechanism: needs security_protocol=SASL_SSL"),
    ("kafka://k:9093?ssl_cafile=/etc/hosts", "ssl_cafile: needs security_protocol=SSL or SASL_SSL"),
    ("kafka://k:9093?security_protocol=SSL&ssl_cafile=/nonexistent/ca.pem", "ssl_cafile: '/nonexistent/ca.pem' is not"),
    ("kafka://k:9093?security_protocol=SSL&ssl_cafile=/etc/hostname", "ssl_cafile:"),
    ("kafka://k:9093?security_protocol=SSL&ssl_certfile=/etc/hosts", "ssl_certfile and ssl_keyfile"),
    ("kafka://u:pw@k:9093", "credentials in the URL need security_protocol=SASL"),
    ("kafka://k", "broker 'k': expected HOST:PORT"),
    ("kafka://k:99999", "the port must be a number"),
    ("kafka://", "no broker"),
    ("kafka://k:9093?novalue", "is not NAME=VALUE"),
])
def test_a_wrong_option_is_refused_by_name(url, named):
    with pytest.raises(ValueError, match=named.replace("(", r"\(").replace("?", r"\?")):
        parse_kafka_url(url, env=ENV)


@pytest.mark.parametrize("env, missing", [({}, "SLUICE_KAFKA_USERNAME"),
                                          ({"SLUICE_KAFKA_USERNAME": "u"}, "SLUICE_KAFKA_PASSWORD")])
def test_sasl_without_credentials_says_where_they_come_from(env, missing):
    with pytest.raises(ValueError, match=missing):
        parse_kafka_url("kafka://k:9093?security_protocol=SASL_PLAINTEXT", env=env)


def test_open_bus_gives_invalid_argument_with_the_password_masked(tmp_path, monkeypatch):
    monkeypatch.delenv("SLUICE_KAFKA_USERNAME", raising=False)
    with pytest.raises(InvalidArgument) as refused:
        open_bus("kafka://ops:hunter2@k:9093?security_protocol=SASL_SSL&bogus=1", tmp_path, SimulatedClock())
    assert refused.value.field == "--bus" and "bogus: unknown option" in str(refused.value)
    assert "hunter2" not in str(refused.value) and "ops:***@k:9093" in str(refused.value)
    with pytest.raises(InvalidArgument) as unsupported:
        open_bus("kafak://ops:hunter2@k:9093", tmp_path, SimulatedClock())
    assert "hunter2" not in str(unsupported.value)


def test_open_bus_passes_the_security_to_the_bus(tmp_path, monkeypatch, cafile):
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    bus = open_bus(f"kafka://127.0.0.1:9093?security_protocol=SASL_SSL&ssl_cafile={cafile}", tmp_path, SimulatedClock())
    assert isinstance(bus, KafkaBus) and bus.bootstrap == "127.0.0.1:9093"
    assert bus.security.protocol == "SASL_SSL" and bus.security.password == "s3cret-env"


@pytest.mark.parametrize("url, shown", [
    ("kafka://ops:hunter2@k:9093?security_protocol=SASL_SSL", "kafka://ops:***@k:9093?security_protocol=SASL_SSL"),
    ("kafka://ops@k:9093", "kafka://ops@k:9093"),
    ("kafka://ops:p@ss@k:9093", "kafka://ops:***@k:9093"),  # an unencoded @ in the password: all of it masked
    ("kafka://k1:9092,k2:9092?security_protocol=SSL&ssl_cafile=/a@b",) * 2,
])
def test_bus_urls_are_shown_with_the_password_masked(url, shown):
    assert mask_url(url) == shown


# -- the topics' replication (issue 25) ---------------------------------------------------------


def test_topic_options_default_to_one_replica_and_dead_letters_kept_forever():
    topics = parse_kafka_url("kafka://k:9092", env=ENV).topics
    assert topics == KafkaTopicOptions(replication_factor=1, min_insync_replicas=None, dead_letter_retention_ms=-1)
    bus = KafkaBus.from_url("kafka://k:9092", env=ENV)
    assert (bus.replication_factor, bus.min_insync_replicas, bus.dead_letter_retention_ms) == (1, None, -1)


def test_open_bus_passes_the_topic_options_to_the_bus(tmp_path):
    bus = open_bus("kafka://h1:9092,h2:9092,h3:9092?replication_factor=3&min_insync_replicas=2"
                   "&dead_letter_retention_ms=2592000000", tmp_path, SimulatedClock())
    assert isinstance(bus, KafkaBus) and bus.bootstrap == "h1:9092,h2:9092,h3:9092"
    assert (bus.replication_factor, bus.min_insync_replicas, bus.dead_letter_retention_ms) == (3, 2, 2_592_000_000)
    assert bus.security == KafkaSecurity()


def test_the_topic_configs_the_bus_asks_for():
    from sluice.bus.port import TopicSpec
    from sluice.bus.topics import DEAD_LETTER, SCHEDULES

    bus = KafkaBus("k:9092", replication_factor=3, min_insync_replicas=2)
    assert bus._configs(TopicSpec("sluice.jobs", 4)) == {"min.insync.replicas": "2"}
    assert bus._configs(TopicSpec(SCHEDULES, 4, compacted=True)) == {"cleanup.policy": "compact",
                                                                     "min.insync.replicas": "2"}
    assert bus._configs(TopicSpec(DEAD_LETTER)) == {"min.insync.replicas": "2", "retention.ms": "-1"}
    assert KafkaBus("k:9092")._configs(TopicSpec("sluice.jobs")) == {}  # the broker's min.insync.replicas


@pytest.mark.parametrize("query, named", [
    ("replication_factor=0", "replication_factor: '0' is not a whole number from 1 to 32767"),
    ("replication_factor=three", "replication_factor: 'three' is not a whole number"),
    ("replication_factor=40000", "replication_factor: '40000'"),
    ("replication_factor=2.5", "replication_factor: '2.5'"),
    ("replication_factor=", "replication_factor: empty value"),
    ("min_insync_replicas=0", "min_insync_replicas: '0' is not a whole number"),
    ("min_insync_replicas=2", "min_insync_replicas: 2 is more than replication_factor=1"),
    ("replication_factor=3&min_insync_replicas=4", "min_insync_replicas: 4 is more than replication_factor=3"),
    ("min_insync_replicas=-1", "min_insync_replicas: '-1'"),
    ("dead_letter_retention_ms=0", "dead_letter_retention_ms: 0 would delete"),
    ("dead_letter_retention_ms=-2", "dead_letter_retention_ms: '-2' is not a whole number -1 or more"),
    ("dead_letter_retention_ms=7d", "dead_letter_retention_ms: '7d'"),
    ("replication_factor=3&replication_factor=3", "replication_factor: given twice"),
])
def test_a_wrong_topic_option_is_refused_by_name(tmp_path, query, named):
    with pytest.raises(InvalidArgument) as refused:
        open_bus(f"kafka://k:9092?{query}", tmp_path, SimulatedClock())
    assert refused.value.field == "--bus" and named in str(refused.value)
