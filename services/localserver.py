"""Start `sluice standalone` or one service as a child process and stop it by its pid."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Sequence


class ServerDidNotStart(RuntimeError):
    pass


class LocalServer:
    """`with LocalServer(data_dir) as server: SluiceClient(server.address)`; port 0 picks a free port."""

    def __init__(self, data_dir: Path, command: Sequence[str] = ("standalone",), args: Sequence[str] = (),
                 env: dict[str, str] | None = None) -> None:
        self.data_dir = Path(data_dir)
        self._argv = [sys.executable, "-m", "sluice_services.cli", *command, "--data-dir", str(data_dir), "--port", "0", *args]
        self._env = {**os.environ, **(env or {})}
        self.process: subprocess.Popen | None = None
        self.address = ""
        self.metrics_address = ""
        """HOST:PORT of GET /metrics when started with --metrics-port, else empty."""

    def start(self) -> "LocalServer":
        self.process = subprocess.Popen(self._argv, stdout=subprocess.PIPE, text=True, env=self._env)
        line = self.process.stdout.readline()
        if " ready on " not in line:
            self.process.kill()
            self.process.wait()
            raise ServerDidNotStart(f"{' '.join(self._argv[3:5])} did not start: {line.strip() or 'no output'}")
        self.address = line.split(" ready on ")[1].split()[0]
        if " metrics on " in line:
            self.metrics_address = line.split(" metrics on ")[1].split()[0]
        return self

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM, then SIGKILL after `timeout`; the exit code."""
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()
        finally:
            self.process.stdout.close()

    @property
    def pid(self) -> int:
        return self.process.pid if self.process else 0

    def __enter__(self) -> "LocalServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
