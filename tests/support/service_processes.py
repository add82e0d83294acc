"""Services as OS processes on fixed ports, which a test can kill -9 and start again with the same
arguments (LocalServer picks a new port per start; clients here keep their address across restarts)."""
from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Mapping, Protocol, Sequence


class ServiceDidNotStart(RuntimeError):
    pass


class Startable(Protocol):
    def start(self) -> object: ...


def start_registry_first(servers: Mapping[str, Startable]) -> None:
    """The registry first (it creates the event log's tables and the topics), then the others side by side."""
    servers["registry"].start()
    others = [server for name, server in servers.items() if name != "registry"]
    with ThreadPoolExecutor(max(1, len(others))) as pool:
        list(pool.map(lambda server: server.start(), others))


class ServiceProcess:
    """`sluice serve NAME` on 127.0.0.1:`port`; stderr appended to `log_path` across restarts."""

    def __init__(self, name: str, port: int, args: Sequence[str], log_path: Path, env: dict[str, str],
                 ready_timeout: float = 90.0) -> None:
        self.name = name
        self.address = f"127.0.0.1:{port}"
        self.log_path = log_path
        self._argv = [sys.executable, "-m", "sluice_services.cli", "serve", name, "--port", str(port), *args]
        self._env = env
        self._ready_timeout = ready_timeout
        self.process: subprocess.Popen | None = None
        self.starts = 0

    @property
    def pid(self) -> int:
        return self.process.pid if self.process else 0

    def start(self) -> "ServiceProcess":
        with open(self.log_path, "ab") as log:
            log.write(f"--- start {self.starts + 1} of {self.name}\n".encode())
            log.flush()
            self.process = subprocess.Popen(self._argv, stdout=subprocess.PIPE, stderr=log, env=self._env)
        self.starts += 1
        line = self._first_line()
        if b" ready on " not in line:
            self.kill()
            raise ServiceDidNotStart(f"{self.name} did not start: {line.decode(errors='replace').strip() or 'no output'}"
                                     f" (see {self.log_path})")
        return self

    def _first_line(self) -> bytes:
        """The ready line, or what came before the process ended or the timeout passed."""
        selector = selectors.DefaultSelector()
        selector.register(self.process.stdout, selectors.EVENT_READ)
        try:
            if not selector.select(self._ready_timeout):
                return b"no ready line within %d s" % self._ready_timeout
            return self.process.stdout.readline()
        finally:
            selector.close()

    def kill(self) -> None:
        """SIGKILL by pid, reaped: no chance to flush, commit or mark anything."""
        if self.process is None:
            return
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.process.stdout.close()

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM, then SIGKILL after `timeout`."""
        if self.process is None or self.process.poll() is not None:
            if self.process is not None:
                self.process.stdout.close()
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return
        self.process.stdout.close()


def wait_for(probe, timeout: float, interval: float = 0.5):
    """The probe's first truthy result within `timeout` seconds, else its last result."""
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(interval)
