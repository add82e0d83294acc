"""A throwaway Kafka broker for tests and development: `with KafkaBroker() as kafka: kafka.bootstrap`.

It runs the jars that deploy/kafka/fetch.sh copies from Maven Central into deploy/kafka/.cache/libs
(the Kafka version is in deploy/kafka/pom.xml), with no Docker and no Kafka shell scripts: a fresh
temporary directory gets a server.properties from deploy/kafka/server.properties.in (a single-node
KRaft broker + controller on 127.0.0.1, two free ports, auto-create off, internal topics with one
replica), `kafka.tools.StorageTool format` formats it under a new cluster id, and
`java -cp 'libs/*' kafka.Kafka server.properties` serves it until the block ends; then the broker
is stopped by its pid (SIGTERM, SIGKILL if it hangs) and the directory removed.

`KafkaBroker(sasl_ssl=True)` also serves a SASL_SSL listener (deploy/kafka/sasl_ssl.properties.in)
on a third free port: openssl makes a CA and a certificate for 127.0.0.1 it signed in the broker's
directory (`ca_file`), and `scram_users` (default: user "sluice" with a random password) get
SCRAM-SHA-512 credentials when the storage is formatted. `sasl_ssl_url()` is the bus URL for it;
the password goes in SLUICE_KAFKA_PASSWORD (`client_env()`), never in the URL.

A cluster of three brokers for broker-fault tests: `tests.support.kafka_cluster.KafkaCluster`, on
the same jars and template (`prepare_java`, `java_command` here).

Needs Java 17; with Maven (`mvn`) on the PATH the jars are fetched on first use (`make kafka-fetch`).
The repository is found from this file, or from $SLUICE_KAFKA_DIR (the folder holding fetch.sh).
"""
from __future__ import annotations

import base64
import ctypes
import os
import secrets
import shutil
import signal
import socket
import string
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

READY_LINE = "Kafka Server started"
DEFAULT_HEAP_OPTS = "-Xmx512m -Xms128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1"  # C1 only: starts in half the CPU
SERVING_HEAP_OPTS = "-Xmx512m -Xms128m"
"""The JVM's defaults (both compilers, G1), as a broker users run: for benchmarks, which measure it serving."""
FETCH_HINT = "run `make kafka-fetch` (deploy/kafka/fetch.sh: Maven copies the broker's jars from Maven Central)"


class KafkaNotInstalled(RuntimeError):
    """Java or the broker's jars are missing and cannot be fetched here."""


class KafkaBroker:
    def __init__(
        self,
        *,
        kafka_dir: str | os.PathLike[str] | None = None,
        fetch: bool = True,
        overrides: Mapping[str, object] | None = None,
        heap_opts: str | None = None,
        start_timeout: float = 90.0,
        stop_timeout: float = 20.0,
        sasl_ssl: bool = False,
        scram_users: Mapping[str, str] | None = None,
    ) -> None:
        self.kafka_dir = Path(kafka_dir) if kafka_dir else find_kafka_dir()
        self.fetch = fetch
        self.overrides = dict(overrides or {})
        self.heap_opts = heap_opts or os.environ.get("KAFKA_HEAP_OPTS") or DEFAULT_HEAP_OPTS
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.sasl_ssl = sasl_ssl
        self.scram_users = dict(scram_users if scram_users is not None
                                else {"sluice": secrets.token_urlsafe(18)} if sasl_ssl else {})
        for name, password in self.scram_users.items():
            if not (_SCRAM_SAFE.issuperset(name) and _SCRAM_SAFE.issuperset(password) and name and password):
                raise ValueError(f"SCRAM user {name!r}: names and passwords are letters, digits, '-', '_' and '.'")
        self.port = 0
        self.controller_port = 0
        self.sasl_ssl_port = 0
        self.cluster_id = ""
        self.dir: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        if not self.port:
            raise RuntimeError("the broker is not running")
        return f"127.0.0.1:{self.port}"

    @property
    def sasl_ssl_bootstrap(self) -> str:
        if not self.sasl_ssl_port:
            raise RuntimeError("the broker serves no SASL_SSL listener (KafkaBroker(sasl_ssl=True))")
        return f"127.0.0.1:{self.sasl_ssl_port}"

    @property
    def ca_file(self) -> Path:
        """The PEM file of the CA that signed the broker's certificate (sasl_ssl=True)."""
        if self.dir is None or not self.sasl_ssl:
            raise RuntimeError("the broker has no TLS certificate (KafkaBroker(sasl_ssl=True))")
        return self.dir / "tls" / "ca.pem"

    def sasl_ssl_url(self, mechanism: str = "SCRAM-SHA-512") -> str:
        """The bus URL of the SASL_SSL listener; credentials come from `client_env()`."""
        return (f"kafka://{self.sasl_ssl_bootstrap}?security_protocol=SASL_SSL&sasl_mechanism={mechanism}"
                f"&ssl_cafile={self.ca_file}")

    def client_env(self, user: str = "sluice") -> dict[str, str]:
        """SLUICE_KAFKA_USERNAME and SLUICE_KAFKA_PASSWORD of one of `scram_users`."""
        return {"SLUICE_KAFKA_USERNAME": user, "SLUICE_KAFKA_PASSWORD": self.scram_users[user]}

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def libs(self) -> Path:
        return self.kafka_dir / ".cache" / "libs"

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> KafkaBroker:
        java = self._prepare()
        self.dir = Path(tempfile.mkdtemp(prefix="sluice-kafka-"))
        try:
            if self.sasl_ssl:
                make_certificates(self.dir / "tls")
            for _attempt in range(3):  # a free port may be taken between finding and binding it
                if self._launch(java):
                    return self
            raise RuntimeError(f"the Kafka broker did not start; its log:\n{self.log_tail()}")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """SIGTERM by pid (a controlled shutdown), SIGKILL if it hangs; then remove the directory."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        self.port = self.sasl_ssl_port = 0
        directory, self.dir = self.dir, None
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = (self.dir / "broker.log").read_text(errors="replace") if self.dir else ""
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # -- plumbing ----------------------------------------------------------------------------

    def _prepare(self) -> str:
        return prepare_java(self.kafka_dir, self.fetch)

    def _java(self, java: str, *args: str) -> list[str]:
        return java_command(java, self.kafka_dir, self.heap_opts, *args)

    def _launch(self, java: str) -> bool:
        """Format fresh storage and start the broker on free ports; True once it serves, False if it exited."""
        assert self.dir is not None
        data = self.dir / "data"
        shutil.rmtree(data, ignore_errors=True)
        self.port, self.controller_port, *sasl = _free_ports(3 if self.sasl_ssl else 2)
        self.sasl_ssl_port = sasl[0] if sasl else 0
        self.cluster_id = new_cluster_id()
        properties = self.dir / "server.properties"
        properties.write_text(self._properties(data))
        properties.chmod(0o600)
        scram = [arg for name, password in self.scram_users.items()
                 for arg in ("--add-scram", f"SCRAM-SHA-512=[name={name},password={password}]")]
        formatted = subprocess.run(
            self._java(java, "kafka.tools.StorageTool", "format", "-t", self.cluster_id, "-c", str(properties), *scram),
            cwd=self.dir, stdin=subprocess.DEVNULL, capture_output=True,
        )
        if formatted.returncode != 0:
            output = (formatted.stdout + formatted.stderr).decode(errors="replace")
            raise RuntimeError(f"formatting the Kafka storage failed ({formatted.returncode}):\n{output}")
        log_path = self.dir / "broker.log"
        with open(log_path, "ab") as log:
            self._process = subprocess.Popen(
                self._java(java, "kafka.Kafka", str(properties)),
                cwd=self.dir, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
            )
        deadline = time.monotonic() + self.start_timeout
        position, started = 0, False
        while time.monotonic() < deadline:
            with open(log_path, "rb") as log:  # scan what was appended since the last look
                log.seek(max(position - len(READY_LINE), 0))
                started = started or READY_LINE.encode() in log.read()
                position = log.tell()
            if started and _accepts(self.port) and (not self.sasl_ssl_port or _accepts(self.sasl_ssl_port)):
                return True
            if self._process.poll() is not None:
                self._process = None
                if b"Address already in use" in log_path.read_bytes():
                    return False
                raise RuntimeError(f"the Kafka broker exited during start-up; its log:\n{self.log_tail()}")
            time.sleep(0.1)
        raise TimeoutError(f"the Kafka broker was not ready within {self.start_timeout}s; its log:\n{self.log_tail()}")

    def _properties(self, data: Path) -> str:
        template = string.Template((self.kafka_dir / "server.properties.in").read_text())
        text = template.substitute(PORT=self.port, CONTROLLER_PORT=self.controller_port, LOG_DIRS=data)
        if self.sasl_ssl:
            assert self.dir is not None
            fragment = string.Template((self.kafka_dir / "sasl_ssl.properties.in").read_text())
            text += "\n" + fragment.substitute(PORT=self.port, CONTROLLER_PORT=self.controller_port,
                                                SASL_SSL_PORT=self.sasl_ssl_port, TLS_DIR=self.dir / "tls")
            # PLAIN too, for tests of the bus's PLAIN option: its users live in the JAAS line (this file is 0600)
            users = " ".join(f'user_{name}="{password}"' for name, password in self.scram_users.items())
            text += ("sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN\n"
                     "listener.name.sasl_ssl.plain.sasl.jaas.config="
                     f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};\n")
        extra = "".join(f"{key}={value}\n" for key, value in self.overrides.items())
        return f"{text}\n# overrides\n{extra}" if extra else text


_SCRAM_SAFE = frozenset(string.ascii_letters + string.digits + "-_.")


def prepare_java(kafka_dir: Path, fetch: bool = True) -> str:
    """Java's path, once the jars are in place (fetched when Maven is here)."""
    java = shutil.which("java")
    if java is None:
        raise KafkaNotInstalled("the Kafka broker needs Java 17+ (`java` is not on the PATH)")
    fetch_sh = kafka_dir / "fetch.sh"
    if fetch and shutil.which("mvn") and fetch_sh.exists():
        result = subprocess.run(["bash", str(fetch_sh)], stdin=subprocess.DEVNULL, capture_output=True)
        if result.returncode != 0:
            output = (result.stdout + result.stderr).decode(errors="replace")
            raise KafkaNotInstalled(f"{fetch_sh} failed ({result.returncode}):\n{output}")
    if not list((kafka_dir / ".cache" / "libs").glob("kafka_2.13-*.jar")):
        raise KafkaNotInstalled(f"no Kafka jars in {kafka_dir / '.cache' / 'libs'}; {FETCH_HINT}")
    return java


def java_command(java: str, kafka_dir: Path, heap_opts: str, *args: str) -> list[str]:
    log4j = kafka_dir / "log4j2.properties"
    return [java, *heap_opts.split(), "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile=file:{log4j}", "-cp", f"{kafka_dir / '.cache' / 'libs'}/*", *args]


def make_certificates(directory: Path, days: int = 2) -> Path:
    """openssl: a CA (ca.pem, ca.key) and a certificate it signed for 127.0.0.1 and localhost, as
    broker.pem (PKCS#8 key, then the certificate and the CA's: Kafka's PEM keystore). EC P-256 keys."""
    directory.mkdir(parents=True, exist_ok=True)
    new_key = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")

    def openssl(*args: object) -> None:
        result = subprocess.run(["openssl", *map(str, args)], cwd=directory, stdin=subprocess.DEVNULL,
                                capture_output=True)
        if result.returncode != 0:
            raise RuntimeError(f"openssl {args[0]} failed: {(result.stdout + result.stderr).decode(errors='replace')}")

    if shutil.which("openssl") is None:
        raise KafkaNotInstalled("a SASL_SSL broker needs `openssl` on the PATH to make its certificates")
    openssl("req", "-x509", *new_key, "-keyout", "ca.key", "-out", "ca.pem", "-days", days,
            "-subj", "/CN=sluice-kafka-test-ca")
    openssl("req", "-new", *new_key, "-keyout", "broker.key", "-out", "broker.csr", "-subj", "/CN=localhost")
    (directory / "broker.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "broker.crt", "-days", days, "-extfile", "broker.ext")
    chain = b"".join((directory / name).read_bytes() for name in ("broker.key", "broker.crt", "ca.pem"))
    (directory / "broker.pem").write_bytes(chain)
    for name in ("ca.key", "broker.key", "broker.pem"):
        (directory / name).chmod(0o600)
    return directory


def find_kafka_dir() -> Path:
    """$SLUICE_KAFKA_DIR, else deploy/kafka of the repository this file is in."""
    override = os.environ.get("SLUICE_KAFKA_DIR")
    directory = Path(override) if override else Path(__file__).resolve().parents[2] / "deploy" / "kafka"
    if not (directory / "server.properties.in").exists():
        raise KafkaNotInstalled(f"{directory} holds no server.properties.in; set SLUICE_KAFKA_DIR to deploy/kafka")
    return directory


def new_cluster_id() -> str:
    """Like Kafka's Uuid.randomUuid(): 16 random bytes, URL-safe base64 without padding, no leading '-'."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:  # held open together, so the ports differ
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def _die_with_parent() -> None:
    """In the child before exec: if this (test) process dies without stopping us, shut down."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
