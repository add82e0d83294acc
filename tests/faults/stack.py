"""The real distributed stack the fault campaign runs on, and the handles its faults pull.

PostgreSQL (tests.support.postgres) holds the event log in a database whose tablespace is a small
tmpfs mounted for the campaign (so its disk can be filled); a 3-broker KRaft cluster
(tests.support.kafka_cluster) carries the bus with every topic on 3 replicas, min.insync.replicas 2;
every service of composition.SERVICES runs as its own `sluice serve NAME` process on a fixed port
(tests.support.service_processes). Each launcher incarnation gets a data dir of its own: a launcher
started after one was killed stands for another host taking over through the lease.
"""
from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg

from sluice_services.composition import SERVICES
from tests.support.kafka_cluster import KafkaCluster
from tests.support.postgres import PostgresServer
from tests.support.service_processes import ServiceProcess

REPO = Path(__file__).resolve().parents[2]
FAKE_SPARK_SUBMIT = REPO / "tests" / "support" / "fake_spark_submit.py"
LEDGER_PROGRAM = Path(__file__).resolve().parent / "ledger_program.py"
NAMESPACE, APP, PROGRAM, DATASET = "faults", "faults", "record", "events"
TABLESPACE = "eventlog_disk"
DATABASE = "faults"
START_TIMEOUT = 240.0
"""For a broker or a service to come up: the default 90 s is short on a 2-core machine that runs other tests."""


class NotRoot(RuntimeError):
    """The event log's disk is a tmpfs mounted by the campaign: only root can mount one."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class EventLogDisk:
    """A tmpfs of `size_mb` in a new directory of the system's temporary one (which the PostgreSQL
    server's user can reach, unlike a test's tmp_path), owned by that user; a ballast file fills it."""

    def __init__(self, size_mb: int) -> None:
        self.path = Path("/nonexistent")
        self.size_mb = size_mb
        self.mounted = False

    def mount(self, owner: tuple[int, int] | None) -> None:
        if os.geteuid() != 0:
            raise NotRoot("the fault campaign mounts a tmpfs for the event log's disk: run it as root")
        self.path = Path(tempfile.mkdtemp(prefix="sluice-faults-disk-"))
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size_mb}m,mode=0700", "tmpfs", str(self.path)],
                       check=True, capture_output=True)
        self.mounted = True
        if owner:
            os.chown(self.path, *owner)

    @property
    def ballast(self) -> Path:
        return self.path / "ballast"

    def fill(self) -> int:
        """Write the ballast until the disk is full; the bytes written."""
        written, chunk = 0, b"\0" * (1 << 20)
        with open(self.ballast, "ab", buffering=0) as ballast:
            while True:
                try:
                    written += ballast.write(chunk)
                except OSError:
                    break
            for size in (1 << 16, 1 << 12, 1 << 9):  # the last pages too
                try:
                    while True:
                        written += ballast.write(chunk[:size])
                except OSError:
                    continue
        return written

    def free(self) -> None:
        self.ballast.unlink(missing_ok=True)

    def unmount(self) -> None:
        if not self.mounted:
            return
        result = subprocess.run(["umount", str(self.path)], capture_output=True)
        if result.returncode != 0:
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True)
        self.mounted = False
        shutil.rmtree(self.path, ignore_errors=True)


class Stack:
    def __init__(self, root: Path, *, lease_seconds: int, disk_mb: int) -> None:
        self.root = root
        self.lease_seconds = lease_seconds
        self.postgres = PostgresServer()
        self.disk = EventLogDisk(disk_mb)
        self.kafka = KafkaCluster(brokers=3, start_timeout=START_TIMEOUT)
        self.ledger = root / "ledger.jsonl"
        self.apps = root / "apps"
        self.run_credential_secret = secrets.token_hex(32)  # launchers on other data dirs must share it
        self.services: dict[str, ServiceProcess] = {}
        self.ports = {name: free_port() for name in SERVICES}  # fixed for the campaign: restarts keep them
        self.launcher_incarnation = 0
        self.host_deaths: dict[str, float] = {}
        """Launcher data dir name -> when its host died (the launcher frozen, then killed with its programs)."""
        self.event_log_url = ""
        self.bus_url = ""
        self.env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> "Stack":
        self.root.mkdir(parents=True, exist_ok=True)
        (self.apps / APP).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(LEDGER_PROGRAM, self.apps / APP / f"{PROGRAM}.py")
        self.postgres.start()
        user = self.postgres._user
        self.disk.mount((user.pw_uid, user.pw_gid) if user else None)
        with psycopg.connect(self.postgres.dsn_for("postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE TABLESPACE {TABLESPACE} LOCATION '{self.disk.path}'")
            conn.execute(f"CREATE DATABASE {DATABASE} TABLESPACE {TABLESPACE}")
        self.event_log_url = f"postgresql://postgres@127.0.0.1:{self.postgres.port}/{DATABASE}?connect_timeout=2"
        self.kafka.start()
        self.bus_url = self.kafka.url(replication_factor=3, min_insync_replicas=2)
        first, *others = SERVICES  # the first migrates the log's schema alone; the others start together
        self.start_service(first)
        with ThreadPoolExecutor(len(others)) as starting:
            for started in [starting.submit(self.start_service, name) for name in others]:
                started.result()
        return self

    def stop(self) -> None:
        """Everything started, by pid, in reverse; the tmpfs unmounted even if a step fails."""
        try:
            for service in self.services.values():
                if service.process is not None and service.process.poll() is None:
                    service.process.send_signal(signal.SIGCONT)  # a stopped one cannot handle SIGTERM
                service.stop(timeout=10)
            self.kill_programs(self.root)
        finally:
            try:
                self.kafka.stop()
            finally:
                try:
                    self.postgres.stop()
                finally:
                    self.disk.unmount()

    def __enter__(self) -> "Stack":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- services ----------------------------------------------------------------------------

    def data_dir(self, name: str) -> Path:
        if name == "launcher":
            return self.root / f"launcher-{self.launcher_incarnation}"
        return self.root / "services"

    def service_args(self, name: str) -> list[str]:
        """Every option a service of the campaign is started with (one place, for new services)."""
        args = ["--data-dir", str(self.data_dir(name)), "--event-log", self.event_log_url, "--bus", self.bus_url,
                "--run-credential-secret", self.run_credential_secret]
        if name == "launcher" and "datasets" in SERVICES:  # the launcher publishes runs' outputs through it
            args += ["--datasets-address", self.address("datasets")]
        if name == "launcher":
            args += ["--spark-submit", str(FAKE_SPARK_SUBMIT), "--spark-master", "local[1]",
                     "--apps-dir", str(self.apps), "--max-parallel-runs", "4",
                     "--lease-seconds", str(self.lease_seconds)]
        return args

    def start_service(self, name: str) -> ServiceProcess:
        if name == "launcher":
            self.launcher_incarnation += 1
        service = ServiceProcess(name, self.ports[name], self.service_args(name), self.root / f"{name}.log", self.env,
                                 ready_timeout=START_TIMEOUT)
        if name in self.services:
            service.starts = self.services[name].starts
        self.services[name] = service
        return service.start()

    def address(self, name: str) -> str:
        return f"127.0.0.1:{self.ports[name]}"

    def exited(self) -> dict[str, int]:
        """Services whose process ended on its own, with its exit code."""
        return {name: service.process.returncode for name, service in self.services.items()
                if service.process is not None and service.process.poll() is not None}

    def kill_programs(self, under: Path) -> int:
        """SIGKILL every process whose command line names `under` (the programs of a launcher's data dir:
        supervise wrappers and the programs they run); how many. Repeated until none is left."""
        killed, needle = 0, str(under).encode() + b"/"
        for _ in range(20):
            found = [pid for pid in _pids() if pid != os.getpid() and needle in _cmdline(pid)]
            if not found:
                break
            for pid in found:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
                except ProcessLookupError:
                    pass
        return killed

    def launcher_host_dies(self) -> None:
        """The launcher's host dies: the launcher frozen (it starts nothing more), its programs killed, then it."""
        launcher = self.services["launcher"]
        self.host_deaths[self.data_dir("launcher").name] = time.time()
        os.kill(launcher.pid, signal.SIGSTOP)
        self.kill_programs(self.data_dir("launcher"))
        launcher.kill()


def _pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read()
    except OSError:
        return b""
