"""A throwaway KRaft cluster for broker-fault tests: `with KafkaCluster(brokers=3) as cluster: cluster.url()`.

Three nodes (by default), each broker and controller in one java process (`kafka.Kafka`, the jars and
server.properties.in of tests.support.kafka, with the overrides of `cluster_properties` appended): a
static controller quorum of all nodes, so one node down leaves a quorum of two and the cluster keeps
serving; two down leave no controller. Every node listens on two free loopback ports, keeps its
storage in a temporary directory and is started and stopped by its pid: `kill(node)` (SIGKILL, a
crash), `restart(node)` (same storage and ports; returns once it serves again), `stop()` (SIGTERM to
all, SIGKILL after stop_timeout; the directory removed). Internal topics (consumer offsets,
transactions) have a replica on every node; Kafka's defaults stay for the rest
(default.replication.factor=1, min.insync.replicas=1), so what replication Sluice's topics get is the
bus's doing (`url(replication_factor=3, min_insync_replicas=2)`). A killed broker is fenced after 3 s
(broker.session.timeout.ms), so leadership moves within seconds. Heap per node: $KAFKA_CLUSTER_HEAP_OPTS
(default CLUSTER_HEAP_OPTS). deploy/kafka/cluster.sh runs the same cluster for developers.
"""
from __future__ import annotations

import os
import shutil
import signal
import string
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from tests.support.kafka import (
    READY_LINE,
    _accepts,
    _die_with_parent,
    _free_ports,
    find_kafka_dir,
    java_command,
    new_cluster_id,
    prepare_java,
)

__all__ = ["CLUSTER_HEAP_OPTS", "KafkaCluster", "cluster_properties"]

CLUSTER_HEAP_OPTS = "-Xmx384m -Xms64m -XX:+UseSerialGC -XX:TieredStopAtLevel=1"  # C1 only: starts faster on 2 cores


def cluster_properties(node_id: int, ports: Mapping[int, tuple[int, int]]) -> dict[str, object]:
    """What a node of a KRaft cluster of len(ports) combined nodes overrides in server.properties.in
    (the later value of a key wins): its id, the static quorum of every node's controller listener,
    its listeners, internal topics on every node (min ISR 2), and failure noticed within seconds.
    `ports` maps node id -> (broker port, controller port). Shared with deploy/kafka/cluster.sh."""
    size = len(ports)
    port, controller_port = ports[node_id]
    return {
        "node.id": node_id,
        "controller.quorum.voters": ",".join(f"{n}@127.0.0.1:{c}" for n, (_, c) in sorted(ports.items())),
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "offsets.topic.replication.factor": size,
        "transaction.state.log.replication.factor": size,
        "transaction.state.log.min.isr": min(2, size),
        "share.coordinator.state.topic.replication.factor": size,
        "share.coordinator.state.topic.min.isr": min(2, size),
        # A killed broker is fenced (and dropped from every ISR) after 3 s, not Kafka's 9 s.
        "broker.session.timeout.ms": 3000,
        "broker.heartbeat.interval.ms": 500,
        "replica.lag.time.max.ms": 5000,
    }


class KafkaCluster:
    """`brokers` KRaft nodes, broker and controller each, one java process per node; nodes are
    named by their id, 1..brokers. Kafka's broker defaults stay (default.replication.factor=1,
    min.insync.replicas=1): replication of Sluice's topics is what the bus asks for."""

    def __init__(
        self,
        brokers: int = 3,
        *,
        kafka_dir: str | os.PathLike[str] | None = None,
        fetch: bool = True,
        overrides: Mapping[str, object] | None = None,
        heap_opts: str | None = None,
        start_timeout: float = 90.0,
        stop_timeout: float = 15.0,
    ) -> None:
        if brokers < 1:
            raise ValueError("a cluster has at least one node")
        self.size = brokers
        self.kafka_dir = Path(kafka_dir) if kafka_dir else find_kafka_dir()
        self.fetch = fetch
        self.overrides = dict(overrides or {})
        self.heap_opts = heap_opts or os.environ.get("KAFKA_CLUSTER_HEAP_OPTS") or CLUSTER_HEAP_OPTS
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.cluster_id = ""
        self.dir: Path | None = None
        self.ports: dict[int, tuple[int, int]] = {}  # node id -> (broker port, controller port)
        self._java_path = ""
        self._processes: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def node_ids(self) -> list[int]:
        return list(range(1, self.size + 1))

    @property
    def bootstrap(self) -> str:
        if not self.ports:
            raise RuntimeError("the cluster is not running")
        return ",".join(self.address(node) for node in self.node_ids)

    def address(self, node: int) -> str:
        return f"127.0.0.1:{self.ports[node][0]}"

    def url(self, **options: object) -> str:
        """The bus URL of every node, with query options: `url(replication_factor=3, min_insync_replicas=2)`."""
        query = "&".join(f"{name}={value}" for name, value in options.items())
        return f"kafka://{self.bootstrap}" + (f"?{query}" if query else "")

    def pid(self, node: int) -> int | None:
        process = self._processes.get(node)
        return process.pid if process is not None and process.poll() is None else None

    def running(self) -> list[int]:
        return [node for node in self.node_ids if self.pid(node) is not None]

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> KafkaCluster:
        self._java_path = prepare_java(self.kafka_dir, self.fetch)
        self.dir = Path(tempfile.mkdtemp(prefix="sluice-kafka-cluster-"))
        try:
            for _attempt in range(3):  # a free port may be taken between finding and binding it
                if self._start_all():
                    return self
            raise RuntimeError(f"the Kafka cluster did not start; its logs:\n{self.log_tails()}")
        except BaseException:
            self.stop()
            raise

    def kill(self, node: int, sig: signal.Signals = signal.SIGKILL) -> None:
        """Send `sig` (SIGKILL: a crash, no controlled shutdown) to the node's process by pid; wait for it
        to end (SIGTERM: a controlled shutdown, up to stop_timeout, then SIGKILL)."""
        process = self._processes.pop(node, None)
        if process is None or process.poll() is not None:
            raise RuntimeError(f"node {node} is not running")
        process.send_signal(sig)
        try:
            process.wait(self.stop_timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)

    def restart(self, node: int) -> None:
        """Start a stopped node again on its storage and ports; returns once it serves."""
        if self.pid(node) is not None:
            raise RuntimeError(f"node {node} is running")
        if not self._launch(node) or not self._wait_ready([node]):
            raise RuntimeError(f"node {node} did not restart; its log:\n{self.log_tail(node)}")

    def stop(self) -> None:
        """SIGTERM to every node by pid, SIGKILL to those still there after stop_timeout; remove the directory."""
        processes, self._processes = list(self._processes.values()), {}
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        for process in processes:
            try:
                process.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                process.kill()  # the last nodes may wait for a controller quorum that is gone
                process.wait(10)
        self.ports = {}
        directory, self.dir = self.dir, None
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def log_tail(self, node: int, lines: int = 40) -> str:
        try:
            text = self._log(node).read_text(errors="replace") if self.dir else ""
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def log_tails(self, lines: int = 25) -> str:
        return "\n".join(f"--- node {node}\n{self.log_tail(node, lines)}" for node in self.node_ids)

    # -- plumbing ----------------------------------------------------------------------------

    def _node_dir(self, node: int) -> Path:
        assert self.dir is not None
        return self.dir / f"node{node}"

    def _log(self, node: int) -> Path:
        return self._node_dir(node) / "broker.log"

    def _start_all(self) -> bool:
        """Fresh storage for every node under one cluster id, every node started; True once all serve."""
        for process in self._processes.values():
            process.kill()
            process.wait(10)
        self._processes = {}
        free = _free_ports(2 * self.size)
        self.ports = {node: (free[2 * i], free[2 * i + 1]) for i, node in enumerate(self.node_ids)}
        self.cluster_id = new_cluster_id()
        template = string.Template((self.kafka_dir / "server.properties.in").read_text())
        formatting = []
        for node in self.node_ids:
            directory = self._node_dir(node)
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir(parents=True)
            port, controller_port = self.ports[node]
            text = template.substitute(PORT=port, CONTROLLER_PORT=controller_port, LOG_DIRS=directory / "data")
            overrides = {**cluster_properties(node, self.ports), **self.overrides}
            text += "\n# a node of a cluster (tests.support.kafka.KafkaCluster)\n" + "".join(
                f"{key}={value}\n" for key, value in overrides.items())
            (directory / "server.properties").write_text(text)
            formatting.append(subprocess.Popen(
                java_command(self._java_path, self.kafka_dir, self.heap_opts, "kafka.tools.StorageTool", "format",
                             "-t", self.cluster_id, "-c", str(directory / "server.properties")),
                cwd=directory, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        for node, process in zip(self.node_ids, formatting):
            output, _ = process.communicate()
            if process.returncode != 0:
                raise RuntimeError(f"formatting node {node}'s storage failed ({process.returncode}):\n"
                                   f"{output.decode(errors='replace')}")
        return all(self._launch(node) for node in self.node_ids) and self._wait_ready(self.node_ids)

    def _launch(self, node: int) -> bool:
        directory = self._node_dir(node)
        with open(self._log(node), "ab") as log:
            log.write(b"\n# --- start\n")
            self._processes[node] = subprocess.Popen(
                java_command(self._java_path, self.kafka_dir, self.heap_opts, "kafka.Kafka",
                             str(directory / "server.properties")),
                cwd=directory, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
            )
        return True

    def _wait_ready(self, nodes: list[int]) -> bool:
        """True once every node of `nodes` logged READY_LINE since its start and accepts connections;
        False if one exited on a port in use (then the cluster starts again on other ports)."""
        marks = {node: self._log(node).read_bytes().rfind(b"# --- start") for node in nodes}
        deadline = time.monotonic() + self.start_timeout
        waiting = set(nodes)
        while waiting:
            for node in sorted(waiting):
                text = self._log(node).read_bytes()[marks[node]:]
                if READY_LINE.encode() in text and _accepts(self.ports[node][0]):
                    waiting.discard(node)
                elif self._processes[node].poll() is not None:
                    if b"Address already in use" in text:
                        return False
                    raise RuntimeError(f"Kafka node {node} exited during start-up; its log:\n{self.log_tail(node)}")
            if waiting and time.monotonic() > deadline:
                raise TimeoutError(f"Kafka nodes {sorted(waiting)} not ready within {self.start_timeout}s:\n"
                                   f"{self.log_tails()}")
            if waiting:
                time.sleep(0.1)
        return True
