"""Kill test of distributed mode: the five services as separate OS processes on a real Kafka broker
with PostgreSQL as the event log, a workload of more than 1,000 partition notifications, and
`kill -9` of a randomly chosen service at random moments, each restarted with the same arguments.

Programs are real OS processes started through the launcher's --spark-submit, pointed at a
stand-in without a JVM (tests/support/fake_spark_submit.py); each execution appends a line to a
ledger. The oracle is computed from the workload alone: the jobs each schedule must launch,
identified by schedule and triggering partitions (or the upstream run, for the chained schedule).
Counted per notification: each expected partition (or upstream run) must reach its schedule's program
exactly once (ledger), in exactly one triggered job (checker's jobs: a job that joined a waiting one
counts in the run that got its notifications) and in exactly one run record that ended (launcher's
runs); every job must be admitted at most once (the log's JobsAdmitted events).

The seed is printed; SLUICE_KILL_SEED=<seed> repeats a sequence of kills."""
from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from psycopg.conninfo import conninfo_to_dict

from sluice.client import SluiceClient
from sluice.domain.common import PartitionRef
from sluice.eventlog.postgres import PostgresEventLog
from sluice.ids import derived_id, run_id_for
from tests.support.kafka import KafkaBroker
from sluice.v1 import jobs_pb2, notifications_pb2 as npb, schedules_pb2 as spb
from sluice_services.composition import SERVICES
from sluice_services.streams import schedule_recorded
from tests.conftest import free_port
from tests.support.service_processes import ServiceProcess, start_registry_first, wait_for

# Beyond the suite's 300 s: on a loaded 2-core machine the drain alone may take minutes (bounded below).
pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
FAKE_SPARK_SUBMIT = REPO / "tests" / "support" / "fake_spark_submit.py"
PROGRAM_SOURCE = REPO / "tests" / "kill_programs" / "record_execution.py"

NAMESPACE, APP = "killtest", "kill"
EVENTS = 980          # notifications of the `events` dataset, one partition each
PAIRS = 25            # AND schedules over `left` (2 partitions each) and `right` (1 each)
KILLS = 22
REGIONS = ("eu", "us", "ap")
PROGRAM_SECONDS = "0.3"  # long enough that a killed launcher often leaves runs going
ENDED = (npb.COMPLETED, npb.FAILED, npb.KILLED, npb.LOST)
DRAIN_TIMEOUT = 300.0


@dataclass(frozen=True)
class CountSchedule:
    """A partition trigger on one dataset: every `count` partitions admitted by `filter`."""
    name: str
    program: str
    dataset: str
    count: int
    filter: dict[str, tuple[str, ...]]

    def admits(self, dataset: str, key: dict[str, str]) -> bool:
        return dataset == self.dataset and all(key.get(k) in allowed for k, allowed in self.filter.items())


COUNT_SCHEDULES = (
    CountSchedule("every_third", "batch3", "events", 3, {}),
    CountSchedule("eu_sevens", "eu7", "events", 7, {"region": ("eu",)}),
    CountSchedule("midnight", "midnight", "events", 1, {"hour": ("00",)}),
)
CHAINED = "after_eu_sevens"  # one run of `chained` per COMPLETED run of eu7
PROGRAMS = ("batch3", "eu7", "midnight", "chained", "paired")


@dataclass(frozen=True)
class Published:
    notification_id: str
    dataset: str
    key: dict[str, str]

    @property
    def partition_id(self) -> str:
        return f"{self.dataset}/{self.key['n']}"


def workload(rng: random.Random) -> list[Published]:
    """The events in order, with each pair's three partitions at random places in between."""
    events = [Published(f"events-{n}", "events", {"region": REGIONS[n % 3], "hour": f"{n // 3 % 24:02d}",
                                                  "n": f"e{n}"}) for n in range(EVENTS)]
    pairs = [Published(f"{side}-{k}-{i}", side, {"pair": str(k), "n": f"{side[0]}{k}.{i}"})
             for k in range(PAIRS) for side, i in (("left", 0), ("left", 1), ("right", 0))]
    slots = sorted(rng.sample(range(len(events) + len(pairs)), len(pairs)))
    merged, rest_events, rest_pairs = [], iter(events), iter(pairs)
    for position in range(len(events) + len(pairs)):
        merged.append(next(rest_pairs) if slots and position == slots[0] else next(rest_events))
        if slots and position == slots[0]:
            slots.pop(0)
    return merged


def schedules(ledger: Path) -> list[spb.Schedule]:
    properties = {"ledger": str(ledger), "seconds": PROGRAM_SECONDS}

    def program(name: str) -> npb.ProgramRef:
        return npb.ProgramRef(namespace=NAMESPACE, app=APP, program=name)

    def partitions(dataset: str, count: int, filter: dict[str, tuple[str, ...]]) -> spb.Trigger:
        return spb.Trigger(partition=spb.PartitionTrigger(
            namespace=NAMESPACE, dataset=dataset, count=count,
            filter={k: spb.AllowedValues(values=list(v)) for k, v in filter.items()}))

    found = [spb.Schedule(name=s.name, enabled=True, program=program(s.program), properties=properties,
                          trigger=partitions(s.dataset, s.count, s.filter)) for s in COUNT_SCHEDULES]
    found.append(spb.Schedule(name=CHAINED, enabled=True, program=program("chained"), properties=properties,
                              trigger=spb.Trigger(program_status=spb.ProgramStatusTrigger(
                                  namespace=NAMESPACE, app=APP, program="eu7", statuses=[npb.COMPLETED], count=1))))
    found += [spb.Schedule(name=f"pair_{k}", enabled=True, program=program("paired"), properties=properties,
                           trigger=spb.Trigger(**{"and": spb.AndTrigger(all_of=[
                               partitions("left", 2, {"pair": (str(k),)}),
                               partitions("right", 1, {"pair": (str(k),)})])}))
              for k in range(PAIRS)]
    return found


def expected_launches(published: list[Published], schedule_ids: dict[str, str]) -> set[tuple]:
    """Launch identities: (schedule name, sorted triggering partitions or upstream run ids)."""
    expected: set[tuple] = set()
    for schedule in COUNT_SCHEDULES:
        admitted = [p.partition_id for p in published if schedule.admits(p.dataset, p.key)]
        for start in range(0, len(admitted) - len(admitted) % schedule.count, schedule.count):
            expected.add((schedule.name, tuple(sorted(admitted[start:start + schedule.count]))))
        if schedule.program == "eu7":  # the chained schedule runs once per run of eu7's jobs 1, 2, ...
            for sequence in range(1, len(admitted) // schedule.count + 1):
                upstream = run_id_for(derived_id("job", schedule_ids[schedule.name], str(sequence)))
                expected.add((CHAINED, (upstream,)))
    for k in range(PAIRS):
        expected.add((f"pair_{k}", tuple(sorted([f"left/l{k}.0", f"left/l{k}.1", f"right/r{k}.0"]))))
    return expected


# -- what happened ------------------------------------------------------------------------------

def ledger_executions(ledger: Path) -> Counter:
    if not ledger.exists():
        return Counter()
    lines = [json.loads(line) for line in ledger.read_text().splitlines() if line.strip()]
    return Counter((e["schedule"], tuple(e["upstream_runs"] or e["partitions"])) for e in lines)


def job_identity(job: jobs_pb2.Job) -> tuple:
    partitions, upstream = [], []
    for notification in job.context.notifications:
        if notification.HasField("partition_committed"):
            committed = notification.partition_committed
            partitions += [f"{committed.dataset}/{next(kv.value for kv in p.key if kv.name == 'n')}"
                           for p in committed.partitions]
        elif notification.HasField("program_status_changed"):
            upstream.append(notification.program_status_changed.run_id)
    return job.context.schedule_name, tuple(sorted(upstream or partitions))


@dataclass(frozen=True)
class Snapshot:
    executions: Counter
    triggered: dict[str, tuple]       # job id -> identity, jobs past their trigger
    job_states: Counter
    runs: dict[str, int]              # run id -> status
    run_jobs: Counter                 # identity -> run records

    def quiescent(self, expected: set[tuple]) -> bool:
        return (set(per_notification(expected)) <= set(per_notification(self.executions))
                and set(self.job_states) <= {"LAUNCHED", "JOINED"}
                and len(self.runs) == len(self.triggered) and all(s in ENDED for s in self.runs.values()))


def snapshot(ledger: Path, checker: SluiceClient, launcher: SluiceClient) -> Snapshot | None:
    try:
        jobs = [j for j in checker.list_jobs() if j.state != jobs_pb2.PENDING_TRIGGER]
        runs = launcher.list_runs()
    except grpc.RpcError:
        return None  # a service is restarting
    triggered = {j.id: job_identity(j) for j in jobs if j.state != jobs_pb2.JOINED}  # its run is the joined job's
    return Snapshot(ledger_executions(ledger), triggered, Counter(jobs_pb2.JobState.Name(j.state) for j in jobs),
                    {r.id: r.status for r in runs},
                    Counter(triggered.get(r.job_id, ("unknown job", (r.job_id,))) for r in runs))


def per_notification(launches: Counter | set) -> Counter:
    """(schedule, partition or upstream run) -> how many launches delivered it."""
    counted = launches if isinstance(launches, Counter) else Counter(launches)
    delivered: Counter = Counter()
    for (schedule, items), count in counted.items():
        for item in items:
            delivered[(schedule, item)] += count
    return delivered


def discrepancies(expected: set[tuple], launches: Counter, what: str) -> list[str]:
    expected, observed = set(per_notification(expected)), per_notification(launches)
    lost = sorted(expected - set(observed))
    duplicated = sorted((i, n) for i, n in observed.items() if n > 1)
    unexpected = sorted(set(observed) - expected)
    found = []
    for label, items in (("lost", lost), ("duplicated", duplicated), ("unexpected", unexpected)):
        if items:
            found.append(f"{what}: {len(items)} {label}, e.g. {items[:8]}")
    return found


def logged_events(event_log: PostgresEventLog) -> list:
    found, position = [], 0
    while batch := event_log.read_all(position, 10_000):
        found += batch
        position = batch[-1].position
    return found


def admitted_twice(events: list) -> list[str]:
    """A job admitted more than once took a second slot of its constraints (the launcher ignores the
    second launch request, so no other count shows it)."""
    admitted = Counter(job["id"] for e in events if e.type == "JobsAdmitted"
                       for job in json.loads(bytes(e.data))["jobs"])
    twice = sorted(job_id for job_id, n in admitted.items() if n > 1)
    return [f"{len(twice)} jobs admitted more than once, e.g. {twice[:8]}"] if twice else []


def unlaunched_jobs(checker: SluiceClient, events: list, limit: int = 3) -> list[str]:
    """Each job the view does not show LAUNCHED: its history there, and the log's events naming it."""
    try:
        jobs = [j for j in checker.list_jobs()
                if j.state not in (jobs_pb2.LAUNCHED, jobs_pb2.JOINED, jobs_pb2.PENDING_TRIGGER)]
    except grpc.RpcError as error:
        return [f"jobs not listed: {error}"]
    found = []
    for job in jobs[:limit]:
        history = [(jobs_pb2.JobState.Name(t.state), t.cause) for t in job.history]
        naming = [(e.position, e.stream, e.type) for e in events if job.id.encode() in bytes(e.data)]
        found.append(f"job {job.id}: view history {history}; log events naming it {naming}")
    return found


# -- the test -----------------------------------------------------------------------------------

def publish(registry: SluiceClient, item: Published, timeout: float = 120.0) -> None:
    """At least once: a publish cut by a kill is retried with the same notification id."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            registry.publish_partitions(NAMESPACE, item.dataset, [PartitionRef(item.key, f"/data/{item.partition_id}",
                                                                               1, 1)], item.notification_id)
            return
        except grpc.RpcError as error:
            if time.monotonic() > deadline:
                raise AssertionError(f"publishing {item.notification_id} failed for {timeout:.0f}s: {error}") from error
            time.sleep(0.2)


def postgres_url(dsn: str) -> str:
    parts = conninfo_to_dict(dsn)
    return f"postgresql://{parts['user']}@{parts['host']}:{parts['port']}/{parts['dbname']}"


def apps_dir(root: Path) -> Path:
    for program in PROGRAMS:
        (root / APP).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(PROGRAM_SOURCE, root / APP / f"{program}.py")
    return root


def test_kill_9_of_random_services_loses_and_duplicates_no_launch(tmp_path, postgres):
    seed = int(os.environ.get("SLUICE_KILL_SEED") or random.SystemRandom().randrange(1 << 32))
    print(f"kill test seed: {seed} (SLUICE_KILL_SEED={seed} repeats it)")
    rng = random.Random(seed)
    ledger = tmp_path / "ledger.jsonl"
    published = workload(rng)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}

    with KafkaBroker() as kafka, contextlib.ExitStack() as stack:
        dsn = postgres_url(postgres.create_database())
        args = ["--data-dir", str(tmp_path / "sluice"), "--event-log", dsn, "--bus", f"kafka://{kafka.bootstrap}",
                "--spark-submit", str(FAKE_SPARK_SUBMIT), "--spark-master", "local[1]",
                "--apps-dir", str(apps_dir(tmp_path / "apps")), "--max-parallel-runs", "4"]
        ports = {name: free_port() for name in SERVICES}
        told = {"launcher": ["--datasets-address", f"127.0.0.1:{ports['datasets']}"]}
        services = {name: ServiceProcess(name, ports[name], [*args, *told.get(name, [])], tmp_path / f"{name}.log", env)
                    for name in SERVICES}
        for service in services.values():
            stack.callback(service.stop)
        start_registry_first(services)
        registry, checker, launcher = (stack.enter_context(SluiceClient(services[n].address))
                                       for n in ("registry", "checker", "launcher"))

        deployed = registry.schedules.DeployApp(spb.DeployAppRequest(
            namespace=NAMESPACE, app=APP, schedules=schedules(ledger),
            programs=[spb.ProgramSpec(name=p, entry_point=f"{p}.py") for p in PROGRAMS]), timeout=30)
        assert len(deployed.created) == len(COUNT_SCHEDULES) + 1 + PAIRS
        schedule_ids = {s.name: s.id for s in registry.list_schedules(NAMESPACE, APP)}
        event_log = PostgresEventLog(dsn)
        stack.callback(event_log.close)
        assert wait_for(lambda: all(schedule_recorded(event_log, i) for i in schedule_ids.values()),
                        timeout=90), "the matcher did not observe every schedule"
        expected = expected_launches(published, schedule_ids)

        victims = rng.sample(sorted(services), len(services)) + [rng.choice(sorted(services))
                                                                 for _ in range(KILLS - len(services))]
        rng.shuffle(victims)
        chunk = -(-len(published) // (KILLS + 1))
        started = time.monotonic()
        for index, victim in enumerate(victims):
            for item in published[index * chunk:(index + 1) * chunk]:
                publish(registry, item)
            time.sleep(rng.uniform(0.0, 3.0))
            services[victim].kill()
            time.sleep(rng.uniform(0.0, 1.0))
            services[victim].start()
        for item in published[KILLS * chunk:]:
            publish(registry, item)
        workload_seconds = time.monotonic() - started

        probe = lambda: (s := snapshot(ledger, checker, launcher)) and s.quiescent(expected) and s  # noqa: E731
        quiescent = bool(wait_for(probe, timeout=DRAIN_TIMEOUT, interval=2.0))
        time.sleep(5.0)  # a late duplicate would show now
        final = wait_for(lambda: snapshot(ledger, checker, launcher), timeout=30)
        drained_seconds = time.monotonic() - started - workload_seconds
        events = logged_events(event_log)
        stuck = [] if quiescent else unlaunched_jobs(checker, events)

    statuses = dict(Counter(npb.RunStatus.Name(s) for s in final.runs.values())) if final else {}
    print(f"{len(published)} notifications, {len(expected)} expected launches, {KILLS} kills "
          f"({dict(Counter(victims))}); workload {workload_seconds:.0f}s, drained in {drained_seconds:.0f}s; "
          f"runs: {statuses}")
    assert final is not None, f"seed {seed}: no snapshot of jobs and runs could be taken"
    problems = [] if quiescent else [f"not quiescent {DRAIN_TIMEOUT:.0f}s after the workload"]
    problems += [*discrepancies(expected, final.executions, "executions (ledger)"),
                 *discrepancies(expected, Counter(final.triggered.values()), "triggered jobs (checker)"),
                 *discrepancies(expected, final.run_jobs, "run records (launcher)")]
    unended = sorted(run for run, status in final.runs.items() if status not in ENDED)
    if unended:
        problems.append(f"{len(unended)} runs never ended, e.g. {unended[:8]}")
    if set(final.job_states) - {"LAUNCHED", "JOINED"}:
        problems.append(f"jobs not launched: {dict(final.job_states)}")
    problems += admitted_twice(events) + stuck
    assert not problems, f"seed {seed}:\n" + "\n".join(problems)
    assert len(published) >= 1000 and len(victims) >= 20
