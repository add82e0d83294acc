"""The Kafka bus URL: its security options (TLS, SASL), the replication of the topics the bus creates,
and the masking of secrets in URLs.

    kafka://[USER[:PASSWORD]@]HOST:PORT[,HOST:PORT...][?OPTION=VALUE&...]

| option            | values                                         | default                            |
|-------------------|------------------------------------------------|------------------------------------|
| security_protocol | PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL       | PLAINTEXT                          |
| sasl_mechanism    | SCRAM-SHA-512, SCRAM-SHA-256, PLAIN            | SCRAM-SHA-512 (SASL_* only)        |
| ssl_cafile        | PEM file of the CAs that sign the brokers' certificates | the system's CAs (SSL, SASL_SSL) |
| ssl_certfile      | PEM client certificate (mutual TLS), with ssl_keyfile | none                        |
| ssl_keyfile       | PEM key of ssl_certfile (its password: env SLUICE_KAFKA_SSL_KEY_PASSWORD) | none   |
| replication_factor | replicas of each topic the bus creates, 1..32767 | 1 (a single development broker) |
| min_insync_replicas | the topics' min.insync.replicas, 1..replication_factor | unset: the broker's default |
| dead_letter_retention_ms | retention.ms of the dead-letter topic, -1 (unlimited) or > 0 | -1 |

The topic options apply when the bus creates a topic (KafkaBus.create_topics); a topic that exists
already keeps its settings (a replication factor that differs is logged as a warning). Producers send
with acks=all, so with min_insync_replicas=2 a write needs two replicas: with fewer in sync it fails
(NotEnoughReplicas) instead of being acknowledged by one broker alone.

Credentials (SASL_* only): the username and password of the URL's userinfo (percent-encoded), else
SLUICE_KAFKA_USERNAME and SLUICE_KAFKA_PASSWORD from the environment -- better, since a command line
is visible to every user of the machine. TLS always verifies the broker's certificate and host name.
Anything else is refused with the option named: an unknown or repeated option, a value out of its
list, a file that cannot be read, a SASL protocol without credentials, and options or credentials the
chosen protocol would ignore (credentials given with PLAINTEXT would silently not be sent).
URLs are shown with sluice.runtime.secrets.mask_url: the password replaced by `***`.
"""
from __future__ import annotations

import os
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote

__all__ = ["KafkaSecurity", "KafkaTopicOptions", "KafkaUnreachable", "KafkaUrl", "diagnose", "parse_kafka_url",
           "USERNAME_ENV", "PASSWORD_ENV", "SSL_KEY_PASSWORD_ENV"]

USERNAME_ENV = "SLUICE_KAFKA_USERNAME"
PASSWORD_ENV = "SLUICE_KAFKA_PASSWORD"
SSL_KEY_PASSWORD_ENV = "SLUICE_KAFKA_SSL_KEY_PASSWORD"

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")
OPTIONS = ("security_protocol", "sasl_mechanism", "ssl_cafile", "ssl_certfile", "ssl_keyfile",
           "replication_factor", "min_insync_replicas", "dead_letter_retention_ms")
MAX_REPLICATION_FACTOR = 32767  # an INT16 in CreateTopics


@dataclass(frozen=True)
class KafkaSecurity:
    """What every aiokafka client of a bus gets: `client_options()`. The password is never in repr."""

    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ssl_context: ssl.SSLContext | None = field(default=None, repr=False, compare=False)

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments of AIOKafkaProducer, AIOKafkaConsumer and AIOKafkaAdminClient."""
        options: dict[str, Any] = {"security_protocol": self.protocol}
        if self.ssl_context is not None:
            options["ssl_context"] = self.ssl_context
        if self.uses_sasl:
            options.update(sasl_mechanism=self.mechanism, sasl_plain_username=self.username,
                           sasl_plain_password=self.password)
        return options

    def describe(self) -> str:
        """For error messages: the protocol, and the mechanism and user (never the password)."""
        return f"{self.protocol}, {self.mechanism} as user {self.username!r}" if self.uses_sasl else self.protocol


@dataclass(frozen=True)
class KafkaTopicOptions:
    """How the bus creates its topics: KafkaBus's keyword arguments (`bus_options()`)."""

    replication_factor: int = 1
    min_insync_replicas: int | None = None  # None: the broker's min.insync.replicas
    dead_letter_retention_ms: int = -1       # -1: dead letters are kept until an operator deletes them

    def bus_options(self) -> dict[str, Any]:
        return {"replication_factor": self.replication_factor, "min_insync_replicas": self.min_insync_replicas,
                "dead_letter_retention_ms": self.dead_letter_retention_ms}


@dataclass(frozen=True)
class KafkaUrl:
    bootstrap: str
    security: KafkaSecurity
    topics: KafkaTopicOptions = KafkaTopicOptions()


def parse_kafka_url(url: str, env: Mapping[str, str] | None = None) -> KafkaUrl:
    """The bootstrap servers and security of a `kafka://` URL; ValueError naming the offending option."""
    env = os.environ if env is None else env
    if not url.startswith("kafka://"):
        raise ValueError("the URL must start with kafka://")
    rest = url.removeprefix("kafka://")
    if "#" in rest:
        raise ValueError("a fragment (#...) has no meaning in a bus URL")
    rest, _, query = rest.partition("?")
    userinfo, at, hosts = rest.rpartition("@")
    hosts = hosts.removesuffix("/")
    bootstrap = _bootstrap(hosts)
    options = _options(query)
    url_user, _, url_password = userinfo.partition(":") if at else ("", "", "")
    protocol = _choice(options, "security_protocol", PROTOCOLS, "PLAINTEXT")
    username = unquote(url_user) or env.get(USERNAME_ENV) or None
    password = unquote(url_password) or env.get(PASSWORD_ENV) or None
    tls = protocol in ("SSL", "SASL_SSL")
    if protocol.startswith("SASL_"):
        mechanism = _choice(options, "sasl_mechanism", MECHANISMS, "SCRAM-SHA-512")
        if not username:
            raise ValueError(f"security_protocol={protocol} needs a username: {USERNAME_ENV} (or USER@ in the URL)")
        if not password:
            raise ValueError(f"security_protocol={protocol} needs a password: {PASSWORD_ENV} "
                             "(or USER:PASSWORD@ in the URL, visible to every user of the machine)")
    else:
        mechanism = None
        if "sasl_mechanism" in options:
            raise ValueError(f"sasl_mechanism: needs security_protocol=SASL_SSL or SASL_PLAINTEXT, not {protocol}")
        if at:
            raise ValueError(f"credentials in the URL need security_protocol=SASL_SSL or SASL_PLAINTEXT, not {protocol}"
                             " (they would not be sent)")
    if not tls:
        for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            if name in options:
                raise ValueError(f"{name}: needs security_protocol=SSL or SASL_SSL, not {protocol}")
    context = _ssl_context(options, env) if tls else None
    return KafkaUrl(bootstrap, KafkaSecurity(protocol, mechanism, username if mechanism else None,
                                             password if mechanism else None, context),
                    _topic_options(options))


# -- plumbing ----------------------------------------------------------------------------------


def _bootstrap(hosts: str) -> str:
    if not hosts:
        raise ValueError("no broker: expected kafka://HOST:PORT[,HOST:PORT]")
    for server in hosts.split(","):
        host, colon, port = server.rpartition(":")
        if not colon or not host or "/" in server:
            raise ValueError(f"broker {server!r}: expected HOST:PORT")
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"broker {server!r}: the port must be a number from 1 to 65535")
    return hosts


def _options(query: str) -> dict[str, str]:
    options: dict[str, str] = {}
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise ValueError(f"the query {query!r} is not NAME=VALUE pairs joined by &") from None
    for name, value in pairs:
        if name not in OPTIONS:
            raise ValueError(f"{name}: unknown option (known: {', '.join(OPTIONS)})")
        if name in options:
            raise ValueError(f"{name}: given twice")
        if not value:
            raise ValueError(f"{name}: empty value")
        options[name] = value
    return options


def _topic_options(options: Mapping[str, str]) -> KafkaTopicOptions:
    replication = _integer(options, "replication_factor", 1, 1, MAX_REPLICATION_FACTOR)
    min_insync = None
    if "min_insync_replicas" in options:
        min_insync = _integer(options, "min_insync_replicas", 1, 1, MAX_REPLICATION_FACTOR)
        if min_insync > replication:
            raise ValueError(f"min_insync_replicas: {min_insync} is more than replication_factor={replication}"
                             " (every acks=all write would fail)")
    retention = _integer(options, "dead_letter_retention_ms", -1, -1, None)
    if retention == 0:
        raise ValueError("dead_letter_retention_ms: 0 would delete dead letters at once; "
                         "-1 keeps them until deleted, or a number of milliseconds > 0")
    return KafkaTopicOptions(replication, min_insync, retention)


def _integer(options: Mapping[str, str], name: str, default: int, low: int, high: int | None) -> int:
    if name not in options:
        return default
    value = options[name]
    number = int(value) if re.fullmatch(r"-?[0-9]{1,18}", value) else None
    if number is None or number < low or (high is not None and number > high):
        bounds = f"from {low} to {high}" if high is not None else f"{low} or more"
        raise ValueError(f"{name}: {value!r} is not a whole number {bounds}")
    return number


def _choice(options: Mapping[str, str], name: str, allowed: tuple[str, ...], default: str) -> str:
    value = options.get(name, default)
    if value.upper() not in allowed:
        raise ValueError(f"{name}: {value!r} is not one of {', '.join(allowed)}")
    return value.upper()


def _ssl_context(options: Mapping[str, str], env: Mapping[str, str]) -> ssl.SSLContext:
    from aiokafka.helpers import create_ssl_context

    cafile, certfile, keyfile = (options.get(name) for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"))
    if bool(certfile) != bool(keyfile):
        raise ValueError("ssl_certfile and ssl_keyfile: give both (a client certificate and its key) or neither")
    for name, path in (("ssl_cafile", cafile), ("ssl_certfile", certfile), ("ssl_keyfile", keyfile)):
        if path is not None and not Path(path).is_file():
            raise ValueError(f"{name}: {path!r} is not a readable file")
    try:
        context = create_ssl_context(cafile=cafile)
    except (OSError, ssl.SSLError) as error:
        raise ValueError(f"ssl_cafile: {cafile!r} holds no PEM certificate ({error})") from None
    if certfile:
        try:
            context.load_cert_chain(certfile, keyfile, password=env.get(SSL_KEY_PASSWORD_ENV) or None)
        except (OSError, ssl.SSLError) as error:
            raise ValueError(
                f"ssl_certfile/ssl_keyfile: cannot load the client certificate and key ({error})") from None
    return context


class KafkaUnreachable(ConnectionError):
    """No broker of the bootstrap list could be reached and logged into: the reason is aiokafka's
    error for the first one (a refused login, a TLS failure, a listener speaking another protocol)."""


async def diagnose(bootstrap: str, security: KafkaSecurity, timeout: float = 10.0) -> KafkaUnreachable:
    """Why aiokafka's "Unable to bootstrap" happened: connect to each broker as the clients do and ask
    for the cluster's metadata (a TLS client without a login is let in and cut off at its first request)."""
    import asyncio

    from aiokafka.conn import create_conn
    from aiokafka.protocol.metadata import MetadataRequest

    async def attempt(host: str, port: int) -> None:
        connection = await create_conn(host, port, **security.client_options())
        try:
            await connection.send(MetadataRequest([]))
        finally:
            connection.close()

    reasons = []
    for server in bootstrap.split(","):
        host, _, port = server.rpartition(":")
        try:
            await asyncio.wait_for(attempt(host, int(port)), timeout)
        except asyncio.TimeoutError:
            reasons.append(f"{server}: no answer within {timeout:.0f}s")
        except Exception as error:  # noqa: BLE001 -- whatever it is, it is the reason
            reason = f"{server}: {type(error).__name__}: {error}"
            if "closed" in str(error):
                reason += f" (is it a {security.protocol} listener? see the URL's security_protocol)"
            reasons.append(reason)
        else:
            reasons.append(f"{server}: answers now (a transient failure?)")
    return KafkaUnreachable(f"cannot use the Kafka cluster at {bootstrap} ({security.describe()}): "
                            + "; ".join(reasons))
