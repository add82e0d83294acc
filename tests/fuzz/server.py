"""The server under fuzz: `sluice standalone` as a child process on free ports (gRPC, lineage HTTP,
metrics), its data in a temporary directory, programs started through the fake spark-submit (no JVM).
Stopped by its pid; its stderr kept in a file so crashes can be traced to a line of product code."""
from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

REPO = Path(__file__).resolve().parents[2]
FAKE_SPARK_SUBMIT = REPO / "tests" / "support" / "fake_spark_submit.py"
CHECK_NAMESPACE, CHECK_APP, CHECK_PROGRAM = "fuzzcheck", "checkapp", "ok"
PROGRAM_SOURCE = '''"""The fuzz suite's stand-in program: writes an empty result, the way the SDK does."""
import json, os, sys
from pathlib import Path
context = json.loads(Path(sys.argv[sys.argv.index("--sluice-context") + 1]).read_text())
result = Path(context["system"]["result_path"])
partial = result.with_name(result.name + ".partial")
partial.write_text(json.dumps({"outputs": [], "inputs": [], "consumed": []}))
os.replace(partial, result)
'''
LINEAGE_LINE = re.compile(rb"lineage HTTP API on http://([^/\s]+)/")
GRPC_SERVICES = ("", "sluice.v1.ScheduleRegistry", "sluice.v1.Notifications", "sluice.v1.Jobs", "sluice.v1.Runs",
                 "sluice.v1.Partitions", "sluice.v1.Lineage")


class ServerDidNotStart(RuntimeError):
    pass


class FuzzServer:
    """One `sluice standalone`; `start()` again after a death keeps the data dir (a restart),
    `fresh()` gives a new data dir (after a crash loop)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.generation = 0
        self.process: subprocess.Popen | None = None
        self.address = self.metrics_address = self.lineage_address = ""
        self.data_dir = self.root / "data-0"
        self.apps_dir = self.root / "apps"
        self.stderr_path = self.root / "server-0.stderr"
        app = self.apps_dir / CHECK_APP
        app.mkdir(parents=True, exist_ok=True)
        (app / f"{CHECK_PROGRAM}.py").write_text(PROGRAM_SOURCE)

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "sluice_services.cli", "standalone", "--data-dir", str(self.data_dir),
                "--port", "0", "--metrics-port", "0", "--lineage-port", "0", "--log-level", "WARNING",
                "--spark-submit", str(FAKE_SPARK_SUBMIT), "--spark-master", "local[1]",
                "--apps-dir", str(self.apps_dir), "--max-parallel-runs", "4"]

    def start(self, timeout: float = 120.0) -> "FuzzServer":
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")]))}
        env.pop("SLUICE_GRPC_TOKEN", None)
        env.pop("SLUICE_CONFIG", None)
        self._stderr_offset = self.stderr_path.stat().st_size if self.stderr_path.exists() else 0
        with open(self.stderr_path, "ab") as stderr:
            self.process = subprocess.Popen(self.argv(), stdout=subprocess.PIPE, stderr=stderr, env=env,
                                            cwd=self.root)
        line = self._ready_line(timeout)
        if b" ready on " not in line:
            self.kill()
            raise ServerDidNotStart(f"sluice standalone did not start: {line.decode(errors='replace').strip()!r};"
                                    f" stderr: {self.stderr_tail(20)}")
        text = line.decode()
        self.address = text.split(" ready on ")[1].split()[0]
        self.metrics_address = text.split(" metrics on ")[1].split()[0] if " metrics on " in text else ""
        deadline = time.monotonic() + 30
        while not self.lineage_address and time.monotonic() < deadline:
            found = LINEAGE_LINE.findall(self.stderr_path.read_bytes()[self._stderr_offset:])
            if found:
                self.lineage_address = found[-1].decode()
            else:
                time.sleep(0.1)
        if not self.lineage_address:
            raise ServerDidNotStart("no 'lineage HTTP API on' line in the server's stderr")
        return self

    def fresh(self) -> "FuzzServer":
        """A new data dir and a new stderr file; the old ones stay for the report."""
        self.stop()
        self.generation += 1
        self.data_dir = self.root / f"data-{self.generation}"
        self.stderr_path = self.root / f"server-{self.generation}.stderr"
        self.address = self.metrics_address = self.lineage_address = ""
        return self.start()

    def _ready_line(self, timeout: float) -> bytes:
        selector = selectors.DefaultSelector()
        selector.register(self.process.stdout, selectors.EVENT_READ)
        try:
            if not selector.select(timeout):
                return b"no ready line within %d s" % timeout
            return self.process.stdout.readline()
        finally:
            selector.close()

    @property
    def pid(self) -> int:
        return self.process.pid if self.process else 0

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def exit_code(self) -> int | None:
        return self.process.poll() if self.process else None

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM by pid, then SIGKILL after `timeout`."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self.process.stdout.close()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stderr_since_start(self) -> str:
        if not self.stderr_path.exists():
            return ""
        return self.stderr_path.read_bytes()[getattr(self, "_stderr_offset", 0):].decode(errors="replace")

    def stderr_tail(self, lines: int) -> str:
        return "\n".join(self.stderr_since_start().splitlines()[-lines:])

    # -- health -------------------------------------------------------------------------------

    def grpc_health(self, timeout: float = 5.0) -> dict[str, str]:
        """Each service's health status name, or the error that stood in for it."""
        found = {}
        try:
            with grpc.insecure_channel(self.address) as channel:
                stub = health_pb2_grpc.HealthStub(channel)
                for service in GRPC_SERVICES:
                    try:
                        status = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout).status
                        found[service or "(server)"] = health_pb2.HealthCheckResponse.ServingStatus.Name(status)
                    except grpc.RpcError as error:
                        found[service or "(server)"] = f"{error.code().name}: {error.details()}"
        except Exception as error:  # noqa: BLE001 - a report, not a decision
            found["(channel)"] = repr(error)
        return found

    def healthz(self, timeout: float = 5.0) -> str:
        try:
            with urllib.request.urlopen(f"http://{self.metrics_address}/healthz", timeout=timeout) as response:
                return f"{response.status} {response.read().decode(errors='replace')}"
        except (urllib.error.URLError, OSError) as error:
            return repr(error)

    def healthy(self) -> bool:
        if not self.alive():
            return False
        statuses = self.grpc_health()
        return all(status in ("SERVING",) for name, status in statuses.items()
                   if name == "(server)" or name == "(channel)") and self.healthz().startswith("200")

    def wait_healthy(self, timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.healthy():
                return True
            if not self.alive():
                return False
            time.sleep(0.5)
        return False
