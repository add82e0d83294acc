"""e2e-latency: notification in -> LaunchRequested out, embedded and over Kafka.

The registry, matcher and checker (not the launcher, which would start Spark) run on one of:
- `file` (embedded mode): in this process's event loop (run_services, gRPC on 127.0.0.1, a free
  port), a SqliteEventLog file and the InProcessBus on a WAL file; `memory`: an in-memory bus;
- `kafka` (distributed mode, as users run it): each service its own OS process (`sluice serve
  NAME` via LocalServer, stopped by pid) on a real Kafka broker and a real PostgreSQL server as
  the event log; this process only publishes notifications and consumes launch requests.
`--bus all` (the default) measures `file` and `kafka`; Kafka figures are prefixed `kafka_`.

Setup per offered rate, a fresh stack in a fresh temp dir: S schedules (default 10,000, the
issue's figure) are created through the registry's gRPC API, CREATE_IN_FLIGHT calls at a time
on one channel, one per dataset with a partition trigger of count 1 (so every notification
triggers one job), and the benchmark waits until the matcher and the checker have recorded them
all (ScheduleObserved, ScheduleTracked in the log, read through its own connection). The stack is then made what a
restart with those schedules leaves: embedded, the heap is frozen out of garbage collection
(sluice.runtime.heap); distributed, the matcher and checker processes are restarted (recovery
freezes theirs). A probe notification's LaunchRequested is awaited, so no consumer is still
joining its group when the clock starts. Setup time (stderr) here, 2 cores at load ~5: ~50 s
per rate for 10,000 schedules in either mode (one at a time it took ~100 s over Kafka), so
`make bench BENCH=e2e-latency` (3 runs, 2 modes, 2 rates) takes ~13 minutes.

Measurement: after a warm-up pass at the same rate, of N notifications or WARM_UP_SECONDS of
sending if that is more (their launch requests awaited and not counted), a bus producer publishes
N PartitionCommitted notifications (default: MEASURE_SECONDS of sending at the rate, at least
1000; a second at 1000/s let a run's tail miss the stalls of sustained load) at the offered rate
(open loop, paced against the schedule; when behind it sends at once), stamping each send time
just before the send. A separate consumer group on `sluice.launch-requests` maps each
LaunchRequested back to its notification (job.context.notifications[].id); latency = receive -
send. CPU per notification goes to stderr: this process's (embedded, split into the event loop's thread,
the other threads and the kernel's share), or the service processes' sum and each one's share, from
/proc/<pid>/stat (Linux only).

Figures per rate R: latency_p50@R/s and latency_p99@R/s in ms (target p99 10 ms embedded),
throughput@R/s: launch requests received per second from the first send to the last receipt
(target R: the stack keeps up with what is offered), and cpu_per_notification@R/s in ms (target
0.3 embedded). Over Kafka, kafka-floor (bench/kafka_floor.py) then runs at the same rate and
count in the same invocation: kafka_p99_ratio_to_floor@R/s is the p99 over the floor's (target 1.5).
A run that did not get every launch request back within DRAIN_TIMEOUT understates the CPU per
notification (the work left undone is not counted): read it beside the "received" count on stderr.

Where the embedded loop's CPU goes (cProfile, SLUICE_PROFILE_CLOCK=cpu, 1,000 schedules, 200/s,
2026-11-27): the matcher's handler ~21%, parsing MatchRequested and JobTriggered into the domain ~13%,
the checker's handler ~15%, the outbox relays ~13%, the jobs view ~8%, the in-process bus (sends,
group commits, polls) ~12%, the matcher lookup ~5%, this benchmark's own sending and receiving ~5%.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import random
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable

import grpc

from bench import Figure, option, percentile, progress
from sluice.bus.inprocess import InProcessBus
from sluice.bus.kafka import KafkaBus
from sluice.bus.topics import LAUNCH_REQUESTS, PARTITION_NOTIFICATIONS, partition_event_key
from sluice.eventlog.batched import expand
from sluice.clock import SystemClock
from sluice.domain.checking import QUEUE_STREAM
from sluice.domain.common import Notification, PartitionCommitted, PartitionRef
from sluice.eventlog.port import EventLog
from sluice.eventlog.postgres import PostgresEventLog
from sluice.eventlog.sqlite import SqliteEventLog
from sluice_services.localserver import LocalServer
from sluice.runtime.heap import freeze_long_lived
from sluice.runtime.service import run_services
from tests.support.kafka import SERVING_HEAP_OPTS, KafkaBroker
from tests.support.postgres import PostgresServer
from sluice.v1 import jobs_pb2, notifications_pb2, schedules_pb2, schedules_pb2_grpc
from sluice.wire.common import notification_to_proto
from sluice_services.composition import checker_spec, matcher_spec, registry_spec

DESCRIPTION = "registry+matcher+checker (embedded, or processes over Kafka): notification -> LaunchRequested p50/p99, throughput"
DEFAULT_SCHEDULES = 10_000
DEFAULT_NOTIFICATIONS = 1_000  # per rate, at least
MEASURE_SECONDS = 5.0
DEFAULT_RATES = (200.0, 1000.0)
TARGET_P99_MS = {"file": 10.0, "memory": 10.0, "kafka": None}
"""Over Kafka the target is the ratio to kafka-floor's p99 measured in the same run."""
TARGET_CPU_MS = {"file": 0.3, "memory": 0.3, "kafka": None}
"""CPU per notification of all of Sluice's work: embedded, this process's (the load's sending included)."""
TARGET_RATIO_TO_FLOOR = 1.5
MODES = {"all": ("file", "kafka"), "file": ("file",), "memory": ("memory",), "kafka": ("kafka",)}
SERVICES = ("registry", "matcher", "checker")
RESTARTED = ("matcher", "checker")  # the services on the notification's path that hold every schedule
NAMESPACE = "bench"
CONSUMER_GROUP = "bench-e2e-latency"
DATABASE = "bench_e2e_latency"
PROBE_ID = "bench-probe"
CREATE_IN_FLIGHT = 64
STARTUP_TIMEOUT = 60.0
WARM_UP_SECONDS = 10.0
"""The warm-up sends the measured load's rate for at least this long (and at least as many
notifications); `--warm-up` sets it."""
DRAIN_TIMEOUT = 15.0  # after the last send, how long to wait for the outstanding launch requests
PROFILE_ENV = "SLUICE_BENCH_PROFILE"
"""Set to a file name: this process is profiled (cProfile) while the measured load is sent and drained,
embedded mode's services included (pstats file; overwritten by each rate)."""
PROFILE_CLOCK_ENV = "SLUICE_PROFILE_CLOCK"
"""`cpu`: the profile times the event loop thread's CPU (time.thread_time), as `sluice serve` does, instead of
wall time, which on a loaded machine also counts the waits for a core; `wall` (the default)."""


@dataclass
class Services:
    """The registry's gRPC address; check() raises if a service stopped; settle() leaves the stack as a
    restart with the schedules would (recovered, heap frozen); cpu(): CPU seconds so far per process."""
    address: str
    check: Callable[[], None]
    settle: Callable[[], None]
    cpu: Callable[[], dict[str, float]]


def run(options: object) -> list[Figure]:
    schedules = option(options, "schedules", DEFAULT_SCHEDULES)
    rates = getattr(options, "rates", None) or DEFAULT_RATES
    seed = getattr(options, "seed", 42)
    warm_up = getattr(options, "warm_up", None)
    warm_up = WARM_UP_SECONDS if warm_up is None else warm_up
    figures: list[Figure] = []
    for bus_kind in MODES[getattr(options, "bus", None) or "all"]:
        prefix = "kafka_" if bus_kind == "kafka" else ""
        for rate in rates:
            label = f"{rate:g}/s"
            notifications = option(options, "notifications", max(DEFAULT_NOTIFICATIONS, math.ceil(rate * MEASURE_SECONDS)))
            with tempfile.TemporaryDirectory(prefix="sluice-bench-e2e-") as tmp:
                latencies, throughput, cpu_ms = asyncio.run(
                    _measure(bus_kind, Path(tmp), rate, schedules, notifications, warm_up, random.Random(seed)))
            p99 = percentile(latencies, 99)
            figures += [
                Figure(f"{prefix}latency_p50@{label}", percentile(latencies, 50), "ms", None),
                Figure(f"{prefix}latency_p99@{label}", p99, "ms", TARGET_P99_MS[bus_kind]),
                Figure(f"{prefix}throughput@{label}", throughput, "launch-requests/s", rate),
                Figure(f"{prefix}cpu_per_notification@{label}", cpu_ms, "ms", TARGET_CPU_MS[bus_kind]),
            ]
            if bus_kind == "kafka":
                from bench import kafka_floor  # it imports this module's send_at_rate

                floor = asyncio.run(kafka_floor.measure(rate, notifications, math.ceil(rate * warm_up)))
                floor_p99 = percentile(floor, 99)
                progress(f"[e2e-latency] kafka-floor at {label} in the same run: p99 {floor_p99:.1f} ms")
                figures.append(Figure(f"kafka_p99_ratio_to_floor@{label}", p99 / floor_p99, "ratio",
                                      TARGET_RATIO_TO_FLOOR))
    return figures


@contextlib.asynccontextmanager
async def _stack(bus_kind: str, tmp: Path):
    """(event log, bus, Services) for one measurement; Kafka mode starts a broker, a PostgreSQL
    server and the services' processes, and stops them all, by pid, however the block ends."""
    async with contextlib.AsyncExitStack() as stack:
        if bus_kind == "kafka":
            kafka = stack.enter_context(KafkaBroker(heap_opts=SERVING_HEAP_OPTS))
            postgres = stack.enter_context(PostgresServer())
            progress(f"[e2e-latency] Kafka broker on {kafka.bootstrap}, PostgreSQL on port {postgres.port}")
            log, bus = PostgresEventLog(postgres.create_database(DATABASE)), KafkaBus(kafka.bootstrap)
        else:
            log, bus = SqliteEventLog(tmp / "events.db"), InProcessBus(tmp / "bus.db" if bus_kind == "file" else None)
        stack.callback(log.close)
        stack.push_async_callback(bus.close)
        if bus_kind != "kafka":
            yield log, bus, await stack.enter_async_context(_embedded(log, bus))
            return
        url = f"postgresql://postgres@127.0.0.1:{postgres.port}/{DATABASE}"
        yield log, bus, stack.enter_context(_processes(tmp, ["--event-log", url, "--bus", f"kafka://{kafka.bootstrap}"]))


@contextlib.asynccontextmanager
async def _embedded(log: EventLog, bus):
    clock, producer, stop = SystemClock(), bus.producer(), asyncio.Event()
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    specs = [registry_spec(log, clock, producer),
             matcher_spec(log, clock, producer, one_member=True),  # as `build` composes it on this bus
             checker_spec(log, clock)]
    stack = asyncio.create_task(run_services(
        specs, bus, log, host="127.0.0.1", port=0, stop=stop,
        on_ready=lambda port: ready.done() or ready.set_result(port)))

    def check() -> None:
        if stack.done():
            stack.result()  # raises what stopped it
            raise RuntimeError("the services stopped")
    try:
        await asyncio.wait([ready, stack], timeout=STARTUP_TIMEOUT, return_when=asyncio.FIRST_COMPLETED)
        check()
        if not ready.done():
            raise TimeoutError(f"the services did not start within {STARTUP_TIMEOUT:.0f} s")
        yield Services(f"127.0.0.1:{ready.result()}", check, freeze_long_lived,
                       lambda: {"this process (services and load)": time.process_time()})
    finally:
        stop.set()
        try:
            await asyncio.wait_for(stack, 10.0)
        except (asyncio.CancelledError, TimeoutError):
            pass
        except Exception as error:  # already reported when it ended the measurement
            progress(f"[e2e-latency] the services ended with {error!r}")


@contextlib.contextmanager
def _processes(tmp: Path, args: list[str]):
    """`sluice serve NAME` for each of SERVICES, each its own process."""
    servers = {name: LocalServer(tmp / "services", command=("serve", name), args=args) for name in SERVICES}

    def check() -> None:
        for name, server in servers.items():
            if server.process.poll() is not None:
                raise RuntimeError(f"the {name} process (pid {server.pid}) exited: {server.process.returncode}")

    def restart() -> None:
        for name in RESTARTED:
            servers[name].stop()
            servers[name].start()

    try:
        for server in servers.values():
            server.start()
        progress("[e2e-latency] " + ", ".join(f"{name} pid {s.pid} on {s.address}" for name, s in servers.items()))
        yield Services(servers["registry"].address, check, restart,
                       lambda: {f"{name} process": process_cpu_seconds(s.pid) for name, s in servers.items()})
    finally:
        for server in servers.values():
            server.stop()


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process, from /proc (Linux only)."""
    return cpu_seconds_of_stat(Path(f"/proc/{pid}/stat").read_text())


def cpu_seconds_of_stat(stat: str) -> float:
    """utime + stime (fields 14 and 15) of a /proc/<pid>/stat line, in seconds. Field 2, the
    command name in parentheses, may itself hold spaces and parentheses: count after the last ')'."""
    fields = stat[stat.rindex(")") + 1:].split()  # fields[0] is field 3, the state
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _measure(bus_kind: str, tmp: Path, rate: float, schedules: int, count: int, warm_up_seconds: float,
                   rng: random.Random) -> tuple[list[float], float]:
    receiver: asyncio.Task | None = None
    async with _stack(bus_kind, tmp) as (log, bus, services):
        try:
            started = time.perf_counter()
            await _create_schedules(services.address, schedules)
            created = time.perf_counter() - started
            await _wait_observed(log, schedules, services.check)
            observed = time.perf_counter() - started
            services.settle()
            received: dict[str, float] = {}
            receiver = asyncio.create_task(_receive(bus.consumer(CONSUMER_GROUP, [LAUNCH_REQUESTS]), received))
            await _probe(bus.producer(), received, services.check)
            warm_up = max(count, math.ceil(rate * warm_up_seconds))
            await _warm_up(bus.producer(), _notifications(warm_up, schedules, rng, "bench-warm-"), rate, received,
                           services.check)
            progress(f"[e2e-latency] setup ({bus_kind}): {schedules} schedules created over gRPC in {created:.1f} s,"
                     f" observed by the matcher and checker after {observed:.1f} s, stack settled, probed and warmed"
                     f" up after {time.perf_counter() - started:.1f} s")

            batch = _notifications(count, schedules, rng)
            sent: dict[str, float] = {}
            due: dict[str, float] = {}
            cpu = services.cpu()
            split_at_start = _embedded_split() if bus_kind != "kafka" else None
            head = log.head_position()
            profiler = _profiler()
            behind = await send_at_rate(bus.producer(), batch, rate, sent, due)
            last_send = time.perf_counter()
            deadline = last_send + DRAIN_TIMEOUT
            while len(received) < count and time.perf_counter() < deadline:
                services.check()
                await asyncio.sleep(0.01)
            cpu = {name: seconds - cpu[name] for name, seconds in services.cpu().items()}
            split = (None if split_at_start is None
                     else tuple(now - then for now, then in zip(_embedded_split(), split_at_start)))
            if profiler is not None:
                profiler.disable()
                profiler.dump_stats(os.environ[PROFILE_ENV])
                progress(f"[e2e-latency] cProfile of the measured load in {os.environ[PROFILE_ENV]}")
            _report_stages(log, head, sent, received)
        finally:
            if receiver is not None:
                receiver.cancel()
                await asyncio.gather(receiver, return_exceptions=True)

    latencies = [(received[nid] - sent[nid]) * 1000 for nid in sent if nid in received]
    missing = count - len(latencies)
    if not latencies:
        raise RuntimeError(f"no LaunchRequested arrived within {DRAIN_TIMEOUT:.0f} s of the last send")
    first_send = min(sent.values())
    last_receipt = max(received[nid] for nid in sent if nid in received)
    throughput = len(latencies) / (last_receipt - first_send)
    sending = last_send - first_send
    progress(f"[e2e-latency] offered {rate:g}/s: sent {count} in {sending:.2f} s ({count / sending:.0f}/s,"
             f" producer at most {behind * 1000:.1f} ms behind schedule), received {len(latencies)},"
             f" max latency {max(latencies):.1f} ms over {last_receipt - first_send:.2f} s from first send to last receipt")
    total = sum(cpu.values())
    shares = ", ".join(f"{name} {seconds:.2f} s ({seconds / max(total, 1e-9):.0%})" for name, seconds in cpu.items())
    progress(f"[e2e-latency] CPU {total:.2f} s, {total / count * 1000:.2f} ms per notification: {shares}")
    if split is not None:
        loop_thread, process, system = split
        others = (process - loop_thread) / count * 1000
        progress(f"[e2e-latency] of it per notification: the event loop's thread {loop_thread / count * 1000:.2f} ms,"
                 f" the other threads (bus and log writes, fsyncs, snapshot writes) {others:.2f} ms;"
                 f" in the kernel {system / max(process, 1e-9):.0%}")
    if behind > 0.05:  # the producer was held back: embedded, by the services on its loop; else by the machine
        intended = [(received[nid] - due[nid]) * 1000 for nid in due if nid in received]
        progress(f"[e2e-latency] from the intended send times instead (what a producer that is not held back"
                 f" would see): p50 {percentile(intended, 50):.1f} ms, p99 {percentile(intended, 99):.1f} ms")
    if missing:
        progress(f"[e2e-latency] WARNING: {missing} of {count} notifications produced no LaunchRequested"
                 f" within {DRAIN_TIMEOUT:.0f} s; their latency is not in the percentiles")
    return latencies, throughput, total / count * 1000


def _embedded_split() -> tuple[float, float, float]:
    """CPU seconds so far of this thread (the event loop's: embedded, every service's handlers), of the
    whole process, and of the process in the kernel (system time)."""
    times = os.times()
    return time.thread_time(), times.user + times.system, times.system


def _profiler():
    """A running cProfile.Profile when PROFILE_ENV is set, else None."""
    if not os.environ.get(PROFILE_ENV):
        return None
    import cProfile

    clock = os.environ.get(PROFILE_CLOCK_ENV, "wall")
    if clock not in ("wall", "cpu"):
        raise ValueError(f"{PROFILE_CLOCK_ENV}: must be wall or cpu, got {clock!r}")
    profiler = cProfile.Profile(time.thread_time) if clock == "cpu" else cProfile.Profile()
    profiler.enable()
    return profiler


async def _create_schedules(address: str, schedules: int) -> None:
    in_flight = asyncio.Semaphore(CREATE_IN_FLIGHT)
    async with grpc.aio.insecure_channel(address) as channel:
        stub = schedules_pb2_grpc.ScheduleRegistryStub(channel)

        async def create(index: int) -> None:
            async with in_flight:
                await stub.CreateSchedule(schedules_pb2.CreateScheduleRequest(schedule=schedules_pb2.Schedule(
                    name=f"on-ds-{index:05d}", enabled=True, properties={"experiment": f"exp-{index}"},
                    program=notifications_pb2.ProgramRef(namespace=NAMESPACE, app="bench", program="noop"),
                    trigger=schedules_pb2.Trigger(partition=schedules_pb2.PartitionTrigger(
                        namespace=NAMESPACE, dataset=_dataset(index), count=1)))), timeout=60.0)
        await asyncio.gather(*(create(index) for index in range(schedules)))


async def _wait_observed(log: EventLog, schedules: int, check: Callable[[], None]) -> None:
    """Until the matcher and the checker have recorded every schedule (both consume them from the
    schedules topic): one still catching up would hold back the notifications behind it."""
    matcher, checker, after = 0, 0, 0

    def all_observed() -> bool:
        nonlocal matcher, checker, after
        for record in log.read_all(after, 1000):
            after = record.position
            matcher += sum(event.type == "ScheduleObserved" for event in expand(record)
                           if event.stream.startswith("matcher-"))
            checker += record.type == "ScheduleTracked" and record.stream == QUEUE_STREAM
        return matcher == checker == schedules
    await _until(all_observed, check, lambda: f"of {schedules} schedules, {matcher} observed, {checker} tracked")


async def _probe(producer, received: dict[str, float], check: Callable[[], None]) -> None:
    """One notification through the whole path (then forgotten): no consumer is still joining its group."""
    _, key, value = _encoded(PROBE_ID, datetime.now(timezone.utc), _dataset(0), "probe")
    await producer.send(PARTITION_NOTIFICATIONS, value, key=key)
    await producer.close()
    await _until(lambda: PROBE_ID in received, check, lambda: "the probe notification produced no LaunchRequested")
    del received[PROBE_ID]


async def _until(done: Callable[[], bool], check: Callable[[], None], failure: Callable[[], str]) -> None:
    deadline = time.perf_counter() + STARTUP_TIMEOUT
    while not done():
        check()
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{failure()} within {STARTUP_TIMEOUT:.0f} s")
        await asyncio.sleep(0.01)


async def _warm_up(producer, batch: list[tuple[str, bytes, bytes]], rate: float, received: dict[str, float],
                   check: Callable[[], None]) -> None:
    """The same rate before the measured load, its launch requests awaited and then forgotten: a
    freshly started broker's JVM compiles its hot paths during its first thousands of requests (over
    Kafka the broker's CPU at 200/s halved once warm), and the services' state grows to what a stack
    that has served for a while holds (the jobs view's snapshots then pack thousands of jobs): both
    what a running deployment has long done. One second of warm-up at 1000/s hid both."""
    await send_at_rate(producer, batch, rate, {}, {})
    await _until(lambda: all(nid in received for nid, _, _ in batch), check,
                 lambda: f"{sum(nid not in received for nid, _, _ in batch)} warm-up notifications produced no LaunchRequested")
    for nid, _, _ in batch:
        del received[nid]


def _notifications(count: int, schedules: int, rng: random.Random,
                   prefix: str = "bench-n-") -> list[tuple[str, bytes, bytes]]:
    """(id, key, value) of each notification, serialised before the clock starts."""
    t0 = datetime.now(timezone.utc)
    return [_encoded(f"{prefix}{index:08d}", t0 + timedelta(milliseconds=index), _dataset(rng.randrange(schedules)),
                     str(index)) for index in range(count)]


def _encoded(nid: str, at: datetime, dataset: str, seq: str) -> tuple[str, bytes, bytes]:
    notification = Notification(nid, at, PartitionCommitted(
        NAMESPACE, dataset, (PartitionRef({"seq": seq}, f"/data/{dataset}/{seq}", 1024, 10),)))
    return nid, partition_event_key(NAMESPACE, dataset).encode(), notification_to_proto(notification).SerializeToString()


async def send_at_rate(producer, batch: list[tuple[str, bytes, bytes]], rate: float, sent: dict[str, float],
                       due: dict[str, float]) -> float:
    """Open loop at `rate`: each send starts on schedule without waiting for the previous one's
    acknowledgement (as many producers publishing at once would), and every send already due starts
    in the same turn of the loop; how far behind schedule the producer fell at worst (s). One send
    per turn made the producer the limit embedded, where a turn runs a cycle of every service."""
    start = time.perf_counter()
    behind = 0.0
    sending: list[asyncio.Task] = []
    index = 0
    while index < len(batch):
        # Always yield: the services run on this loop, a late producer must not starve them.
        await asyncio.sleep(max(start + index / rate - time.perf_counter(), 0.0))
        now = time.perf_counter()
        while index < len(batch) and (due_at := start + index / rate) <= now:
            nid, key, value = batch[index]
            due[nid] = due_at
            behind = max(behind, now - due_at)
            sent[nid] = time.perf_counter()
            sending.append(asyncio.ensure_future(producer.send(PARTITION_NOTIFICATIONS, value, key=key)))
            index += 1
    await asyncio.gather(*sending)
    await producer.close()
    return behind


async def _receive(consumer, received: dict[str, float]) -> None:
    try:
        while True:
            records = await consumer.poll(timeout=0.2)
            now = time.perf_counter()
            for record in records:
                message = jobs_pb2.LaunchRequested()
                message.ParseFromString(record.value)
                for notification in message.job.context.notifications:
                    received.setdefault(notification.id, now)
    finally:  # no offset commits: a fresh group on a fresh stack, and a commit would delay the next poll
        await consumer.close()


def _report_stages(log: EventLog, after: int, sent: dict[str, float], received: dict[str, float]) -> None:
    """Diagnostics: where the latency goes, from the recorded_at (wall clock) of the matcher's
    JobTriggered and the checker's JobsAdmitted of each notification's job; `sent` and `received`
    are perf_counter() times, put on the wall clock here."""
    to_wall = time.time() - time.perf_counter()
    sent = {nid: at + to_wall for nid, at in sent.items()}
    received = {nid: at + to_wall for nid, at in received.items()}
    triggered: dict[str, float] = {}
    admitted: dict[str, float] = {}
    while events := log.read_all(after, 5000):
        after = events[-1].position
        for event in (event for record in events for event in expand(record)):
            target = {"JobTriggered": triggered, "JobsAdmitted": admitted}.get(event.type)
            if target is not None:
                data = json.loads(event.data)
                for job in data["jobs"] if "jobs" in data else (data["job"],):
                    for notification in job["context"]["notifications"]:
                        target.setdefault(notification["id"], event.recorded_at.timestamp())
    stages = [("sent -> matcher's JobTriggered committed", sent, triggered),
              ("JobTriggered -> checker's JobsAdmitted committed", triggered, admitted),
              ("JobsAdmitted -> LaunchRequested received", admitted, received)]
    parts = []
    for name, start, end in stages:
        spans = [(end[nid] - start[nid]) * 1000 for nid in start if nid in end]
        if spans:
            parts.append(f"{name}: p50 {percentile(spans, 50):.1f} / p99 {percentile(spans, 99):.1f} ms")
    progress("[e2e-latency] stages: " + "; ".join(parts))


def _dataset(index: int) -> str:
    return f"ds-{index:05d}"

