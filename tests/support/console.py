"""For the web console's browser tests: a real `sluice standalone --web-port 0` with an authorization
policy (an admin and a reader-only principal), programs run by the fake spark-submit (no JVM), some
demo-like data put in through the gRPC API, and headless Chromium driven by selenium through
Debian's /usr/bin/chromedriver (selenium-manager never asked to download anything)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc

from sluice.bus.inprocess import InProcessBus
from sluice.bus.topics import PARTITION_NOTIFICATIONS
from sluice.runtime.auth_policy import hash_token
from sluice.v1 import datasets_pb2, datasets_pb2_grpc, notifications_pb2, schedules_pb2, schedules_pb2_grpc

REPO = Path(__file__).resolve().parents[2]
FAKE_SPARK_SUBMIT = REPO / "tests" / "support" / "fake_spark_submit.py"
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
ADMIN_TOKEN, READER_TOKEN = "console-admin-token", "console-reader-token"
POLICY = f"""
[[principal]]
name = "ada"
token_sha256 = "{hash_token(ADMIN_TOKEN)}"
grants = [{{ role = "admin", namespace = "*" }}]

[[principal]]
name = "rita"
token_sha256 = "{hash_token(READER_TOKEN)}"
grants = [{{ role = "reader", namespace = "*" }}]
"""
PROGRAM = '''"""The console test's program: publishes one output partition per input partition (same hour,
same record count) into the dataset its schedule names (property output_dataset), after sleeping
the seconds of property sleep_seconds (a run to cancel). It says what it does on stdout (its log)."""
import hashlib, json, os, sys, time
from pathlib import Path
context = json.loads(Path(sys.argv[sys.argv.index("--sluice-context") + 1]).read_text())
system, dataset = context["system"], context["properties"].get("output_dataset", "counts")
print(f"counting {len(context['notifications'])} notifications into web.{dataset}", flush=True)
time.sleep(float(context["properties"].get("sleep_seconds", 0)))
outputs = []
for notification in context["notifications"]:
    for index, partition in enumerate(notification.get("partitions", [])):
        staged = Path(system["staging_dir"]) / f"{dataset}-{index}-{partition['key']['hour']}"
        staged.mkdir(parents=True)
        data = json.dumps({"hour": partition["key"]["hour"], "count": partition["record_count"]}).encode() + b"\\n"
        (staged / "part-0.json").write_bytes(data)
        outputs.append({"namespace": "web", "dataset": dataset, "key": {"hour": partition["key"]["hour"]},
                        "staged_location": str(staged), "format": "json", "size_bytes": len(data),
                        "record_count": partition["record_count"],
                        "files": [{"path": "part-0.json", "size_bytes": len(data),
                                   "sha256": hashlib.sha256(data).hexdigest()}]})
result = Path(system["result_path"])
partial = result.with_name(result.name + ".partial")
partial.write_text(json.dumps({"outputs": outputs, "inputs": [], "consumed": []}))
os.replace(partial, result)
'''


class ConsoleServer:
    """`sluice standalone --web-port 0 --auth-policy ...` as a child process, stopped by its pid."""

    def __init__(self, root: Path, policy: bool = True) -> None:
        self.root = root
        self.data_dir = root / "data"
        self.apps_dir = root / "apps"
        (self.apps_dir / "analytics").mkdir(parents=True, exist_ok=True)
        (self.apps_dir / "analytics" / "count.py").write_text(PROGRAM)
        self.argv = [sys.executable, "-m", "sluice_services.cli", "standalone", "--data-dir", str(self.data_dir),
                     "--port", "0", "--web-port", "0", "--spark-submit", str(FAKE_SPARK_SUBMIT),
                     "--spark-master", "local[1]", "--apps-dir", str(self.apps_dir), "--max-parallel-runs", "4"]
        if policy:
            (root / "policy.toml").write_text(POLICY)
            self.argv += ["--auth-policy", str(root / "policy.toml")]
        self.process: subprocess.Popen | None = None
        self.address = self.web = ""

    def start(self) -> "ConsoleServer":
        env = {key: value for key, value in os.environ.items()
               if not key.startswith("SLUICE_") or key in ("SLUICE_SERVER",)}
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")]))
        self.stderr = open(self.root / "server.stderr", "ab")
        self.process = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=self.stderr, env=env, cwd=self.root,
                                        text=True)
        line = self.process.stdout.readline()
        if " ready on " not in line or " web on " not in line:
            self.stop()
            raise RuntimeError(f"standalone did not start: {line!r}; see {self.root / 'server.stderr'}")
        self.address = line.split(" ready on ")[1].split()[0]
        self.web = "http://" + line.split(" web on ")[1].split()[0]
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait()
        if self.process is not None:
            self.process.stdout.close()
            self.stderr.close()


def bearer(token: str) -> tuple[tuple[str, str], ...] | None:
    return (("authorization", f"Bearer {token}"),) if token else None


def schedule(name: str, trigger: dict, *, enabled: bool = True, output: str = "counts",
             constraints: list | None = None, sleep_seconds: int = 0) -> schedules_pb2.Schedule:
    properties = {"output_dataset": output, **({"sleep_seconds": str(sleep_seconds)} if sleep_seconds else {})}
    return schedules_pb2.Schedule(name=name, program={"namespace": "web", "app": "analytics", "program": "count"},
                                  trigger=trigger, enabled=enabled, properties=properties,
                                  constraints=constraints or [])


def load_demo_data(channel: grpc.Channel, token: str, data_dir: Path) -> dict[str, str]:
    """Datasets web.clicks (input), web.counts and web.blocked (outputs; web.blocked's directory is
    a file, so its commit sequence fails until quarantined), five schedules (long_report: a yearly one
    whose program sleeps, to run now and cancel), two partitions of clicks. Returns the schedules' ids by name."""
    partitions = datasets_pb2_grpc.PartitionsStub(channel)
    registry = schedules_pb2_grpc.ScheduleRegistryStub(channel)
    metadata = bearer(token)
    for name in ("clicks", "counts", "blocked"):
        partitions.CreateDataset(datasets_pb2.CreateDatasetRequest(dataset=datasets_pb2.Dataset(
            namespace="web", name=name, partition_keys=[{"name": "hour", "type": datasets_pb2.KEY_TYPE_INT}],
            base_location=str(data_dir / "data" / "web" / name), description=f"{name} per hour")),
            metadata=metadata)
    blocker = data_dir / "data" / "web" / "blocked"
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("a file where the dataset's directory should be: every commit to it fails\n")
    clicks = {"partition": {"namespace": "web", "dataset": "clicks", "count": 1}}
    ids = {}
    for item in (schedule("hourly_counts", clicks),
                 schedule("blocked_writer", clicks, output="blocked"),
                 schedule("nightly_report", {"time": {"cron": "0 2 * * *", "zone": "Asia/Tokyo"}}, enabled=False),
                 schedule("delayed_counts", clicks, output="counts",
                          constraints=[{"delay": {"seconds": 86_400}}]),
                 schedule("long_report", {"time": {"cron": "0 0 1 1 *", "zone": "UTC"}}, sleep_seconds=300)):
        created = registry.CreateSchedule(schedules_pb2.CreateScheduleRequest(schedule=item), metadata=metadata)
        ids[item.name] = created.id
    for hour in (1, 2):
        partitions.AddPartitions(datasets_pb2.AddPartitionsRequest(namespace="web", dataset="clicks", owner="test",
                                 partitions=[notifications_pb2.PartitionRef(
                                     key=[{"name": "hour", "value": str(hour)}],
                                     location=str(data_dir / "data" / "web" / "clicks" / f"hour={hour}"), size_bytes=1000 * hour,
                                     record_count=100 * hour)]), metadata=metadata)
        time.sleep(1.0)  # one run at a time per dataset: the second commit to web.blocked finds the first failed
    return ids


async def dead_letter_poison(data_dir: Path, count: int) -> None:
    """Malformed notifications put on a standalone's own bus file (under `data_dir`): its matcher
    dead-letters each one."""
    bus = InProcessBus(data_dir / "bus.db")
    producer = bus.producer()
    for index in range(count):
        await producer.send(PARTITION_NOTIFICATIONS, b"\xff poison %d" % index, key=b"partition:web.clicks")
    await producer.close()
    await bus.close()


def chrome(download_dir: Path):
    """Headless Chromium through /usr/bin/chromedriver; never selenium-manager."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"  # selenium-manager, if it were ever asked, must not download
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1400,1000", "--disable-extensions", "--no-first-run",
                     f"--user-data-dir={download_dir}"):
        options.add_argument(argument)
    return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
