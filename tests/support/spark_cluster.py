"""A Spark standalone cluster for tests: one master and two workers, separate JVMs from pyspark's own
jars, on free ports of a loopback address, started and stopped by pid through deploy/spark/cluster.sh
(what `make spark-up` runs) with its state in a directory of the test's own.

    with SparkCluster(tmp_path / "spark") as cluster:
        LocalServer(..., args=["--spark-master", cluster.master_url])
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "spark" / "cluster.sh"


def kill_programs_under(directory: Path) -> list[int]:
    """SIGKILL every process whose command line names `directory` (a test's data dir): the programs a
    launcher started outlive it by design, and a test that failed mid-run must not leave their drivers
    retrying a cluster it stopped. Their pids."""
    killed = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if str(directory).encode() in (entry / "cmdline").read_bytes():
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
        except (OSError, ProcessLookupError):
            continue
    return killed


class SparkClusterDidNotStart(RuntimeError):
    pass


class SparkCluster:
    def __init__(self, state_dir: Path, host: str = "127.0.0.1", workers: int = 2, start_timeout: int = 300) -> None:
        self.state_dir = Path(state_dir)
        self.host = host
        self.workers = workers
        self._env = {**os.environ, "SPARK_CLUSTER_DIR": str(self.state_dir), "SPARK_CLUSTER_HOST": host,
                     "SPARK_WORKERS": str(workers), "SPARK_START_TIMEOUT": str(start_timeout),
                     "PYSPARK_PYTHON": sys.executable}
        self._start_timeout = start_timeout
        self.master_url = ""
        self.master_webui = ""

    def start(self) -> "SparkCluster":
        done = self._run("up", self._start_timeout * (1 + self.workers) + 60)
        if done.returncode != 0:
            raise SparkClusterDidNotStart(f"deploy/spark/cluster.sh up: exit {done.returncode}: {done.stderr[-2000:]}")
        self.master_url = (self.state_dir / "master.url").read_text().strip()
        self.master_webui = (self.state_dir / "master.webui").read_text().strip()
        return self

    def pids(self) -> dict[str, int]:
        """master, worker-1, worker-2...: the pids of the cluster's processes."""
        return {path.stem: int(path.read_text()) for path in sorted(self.state_dir.glob("*.pid"))}

    def stop(self) -> None:
        self._run("down", 120)

    def _run(self, verb: str, timeout: float) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(SCRIPT), verb], env=self._env, capture_output=True, text=True,
                              timeout=timeout)

    def __enter__(self) -> "SparkCluster":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
